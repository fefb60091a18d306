"""The audit log in SQL: appending to each tenant's hash chain, reading it back,
verifying it (see :mod:`.chain` for the link encoding and :mod:`.audit` for the
group-commit writer that calls :meth:`AuditStore.append_audit`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from interlock.store.chain import GENESIS, link_hash, verify_rows
from interlock.store.records import AuditRow, ChainBreak, VerifyReport
from interlock.store.sql_base import AuditEntry, Cursor, StoreBase

__all__ = ["AuditStore"]

_AUDIT_COLUMNS = "tenant, seq, ts_us, kind, decision_id, agent, decision, body, prev_hash, hash"


class AuditStore(StoreBase):
    """Appends to and reads the per-tenant audit chains."""

    def try_append_audit(self, entries: Sequence[AuditEntry]) -> list[int] | None:
        """Append as :meth:`append_audit` does (durability ``process``) only if that
        cannot wait — no lock held by another writer, no network round trip, no
        checkpoint — else write nothing and return ``None``. The audit writer uses it to
        commit on an event loop's own thread; a back end that cannot promise it (the
        default) always answers ``None``."""
        return None

    def append_audit(self, entries: Sequence[AuditEntry], *, durable: bool = False) -> list[int]:
        """Append records to their tenants' chains in one transaction; return their
        sequence numbers. ``durable`` asks the back end to sync to disk on commit."""
        with self.audit_transaction(durable) as cur:
            return self._append(cur, entries)

    def _append(self, cur: Cursor, entries: Sequence[AuditEntry]) -> list[int]:
        """Append inside the caller's transaction (so a state change and its record
        commit together)."""
        seqs: list[int] = []
        # Lock the heads in one order (sorted), whatever the entries' order: two
        # replicas appending to the same tenants must not deadlock.
        heads = {t: self._lock_head(cur, t) for t in sorted({e[0] for e in entries})}
        rows: list[tuple[Any, ...]] = []
        for tenant, ts_us, kind, decision_id, agent, decision, body in entries:
            seq, prev = heads[tenant][0] + 1, heads[tenant][1]
            digest = link_hash(
                prev,
                tenant,
                seq,
                ts_us,
                kind,
                decision_id,
                agent,
                decision,
                body,
                self.audit_key,
            )
            rows.append(
                (tenant, seq, ts_us, kind, decision_id, agent, decision, body, prev, digest)
            )
            heads[tenant] = (seq, digest)
            seqs.append(seq)
        cur.executemany(
            self.q(f"INSERT INTO audit_events ({_AUDIT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)"),
            rows,
        )
        cur.executemany(
            self.q("UPDATE audit_heads SET seq = ?, hash = ? WHERE tenant = ?"),
            [(seq, digest, tenant) for tenant, (seq, digest) in heads.items()],
        )
        return seqs

    def audit_transaction(self, durable: bool) -> AbstractContextManager[Cursor]:
        """The write transaction audit appends run in; ``durable`` makes its commit
        wait for the disk (SQLite: synchronous=FULL; PostgreSQL: synchronous_commit on
        for this transaction, whatever the server's default)."""
        return self.transaction(write=True)

    def _lock_head(self, cur: Cursor, tenant: str) -> tuple[int, str]:
        cur.execute(
            self.q(
                "INSERT INTO audit_heads (tenant, seq, hash) VALUES (?, 0, ?) "
                "ON CONFLICT (tenant) DO NOTHING"
            ),
            (tenant, GENESIS),
        )
        cur.execute(
            self.q(f"SELECT seq, hash FROM audit_heads WHERE tenant = ?{self.for_update}"),
            (tenant,),
        )
        seq, digest = cur.fetchone()
        return int(seq), str(digest)

    def audit_tenants(self) -> list[str]:
        with self.transaction(write=False) as cur:
            cur.execute(self.q("SELECT tenant FROM audit_heads ORDER BY tenant"))
            return [str(row[0]) for row in cur.fetchall()]

    def audit_rows(
        self,
        *,
        tenant: str | None = None,
        since_us: int | None = None,
        until_us: int | None = None,
        agent: str | None = None,
        decision: str | None = None,
        kind: str | None = None,
        newest_first: bool = False,
        limit: int | None = None,
        page: int = 1000,
    ) -> Iterator[AuditRow]:
        """Audit records matching every filter given, oldest first (or newest first),
        read in pages so a large log streams."""
        where: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("tenant", tenant),
            ("agent", agent),
            ("decision", decision),
            ("kind", kind),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if since_us is not None:
            where.append("ts_us >= ?")
            params.append(since_us)
        if until_us is not None:
            where.append("ts_us < ?")
            params.append(until_us)
        order = "DESC" if newest_first else "ASC"
        cursor_at: tuple[int, str, int] | None = None  # (ts_us, tenant, seq) of the last row
        remaining = limit
        while remaining is None or remaining > 0:
            size = page if remaining is None else min(page, remaining)
            clauses = list(where)
            args = list(params)
            if cursor_at is not None:
                op = "<" if newest_first else ">"
                clauses.append(f"(ts_us, tenant, seq) {op} (?, ?, ?)")
                args.extend(cursor_at)
            sql = f"SELECT {_AUDIT_COLUMNS} FROM audit_events"
            if clauses:
                sql += " WHERE " + " AND ".join(clauses)
            sql += f" ORDER BY ts_us {order}, tenant {order}, seq {order} LIMIT {int(size)}"
            with self.transaction(write=False) as cur:
                cur.execute(self.q(sql), args)
                batch = [_audit_row(row) for row in cur.fetchall()]
            yield from batch
            if len(batch) < size:
                return
            last = batch[-1]
            cursor_at = (last.ts_us, last.tenant, last.seq)
            if remaining is not None:
                remaining -= len(batch)

    def audit_chain(self, tenant: str, *, page: int = 5000) -> Iterator[AuditRow]:
        """One tenant's chain in ``seq`` order."""
        after = 0
        while True:
            with self.transaction(write=False) as cur:
                cur.execute(
                    self.q(
                        f"SELECT {_AUDIT_COLUMNS} FROM audit_events WHERE tenant = ? AND seq > ? "
                        f"ORDER BY seq LIMIT {int(page)}"
                    ),
                    (tenant, after),
                )
                batch = [_audit_row(row) for row in cur.fetchall()]
            yield from batch
            if len(batch) < page:
                return
            after = batch[-1].seq

    def audit_head(self, tenant: str) -> tuple[int, str] | None:
        with self.transaction(write=False) as cur:
            cur.execute(self.q("SELECT seq, hash FROM audit_heads WHERE tenant = ?"), (tenant,))
            row = cur.fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def verify_audit(self, tenant: str | None = None) -> VerifyReport:
        """Walk every tenant's chain (or one) and name the first broken link of each."""
        tenants = [tenant] if tenant is not None else self._chain_tenants()
        checked: dict[str, int] = {}
        breaks: list[ChainBreak] = []
        for name in tenants:
            head = self.audit_head(name)
            for outcome in verify_rows(name, self.audit_chain(name), head, self.audit_key):
                if isinstance(outcome, ChainBreak):
                    breaks.append(outcome)
                else:
                    checked[name] = outcome
        return VerifyReport(checked=checked, breaks=tuple(breaks))

    def _chain_tenants(self) -> list[str]:
        with self.transaction(write=False) as cur:
            cur.execute(
                self.q(
                    "SELECT tenant FROM audit_heads UNION SELECT DISTINCT tenant FROM audit_events "
                    "ORDER BY 1"
                )
            )
            return [str(row[0]) for row in cur.fetchall()]


def _audit_row(row: Any) -> AuditRow:
    return AuditRow(
        tenant=str(row[0]),
        seq=int(row[1]),
        ts_us=int(row[2]),
        kind=str(row[3]),
        decision_id=row[4],
        agent=row[5],
        decision=row[6],
        body=str(row[7]),
        prev_hash=str(row[8]),
        hash=str(row[9]),
    )
