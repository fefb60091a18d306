"""The store's logic, written once in SQL both back ends run.

Every state change is one transaction, and every contended change is one atomic
conditional statement — a reservation is ``INSERT ... ON CONFLICT DO UPDATE ...
WHERE spent + reserved + amount <= cap``, never a read followed by a write — so no
interleaving of threads, processes or replicas can overspend, double-claim or
double-commit. The back ends (:mod:`.sqlite`, :mod:`.postgres`) supply connections,
transactions and the few words in which their SQL differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any, Protocol

from interlock.core.redaction import Redactor
from interlock.errors import (
    ApprovalClosed,
    ApprovalNotFound,
    ReservationClosed,
    ReservationNotFound,
    SelfApproval,
)
from interlock.store.chain import GENESIS, audit_key, encode_body, link_hash, verify_rows
from interlock.store.records import (
    APPROVAL_COLUMNS,
    ApprovalRecord,
    ApprovalStatus,
    AuditRow,
    BudgetLine,
    BudgetRow,
    ChainBreak,
    ClaimOutcome,
    RateOutcome,
    ReapResult,
    Refusal,
    Reservation,
    ReservationStatus,
    ReserveOutcome,
    VerifyReport,
    now_us,
)

__all__ = ["AuditEntry", "Cursor", "SqlStore"]

#: One audit record to append: tenant, ts_us, kind, decision_id, agent, decision, body.
AuditEntry = tuple[str, int, str, str | None, str | None, str | None, str]

_RESERVATION_COLUMNS = (
    "id, tenant, idempotency_key, status, lines, created_us, expires_us, settled_us, actual"
)
_AUDIT_COLUMNS = "tenant, seq, ts_us, kind, decision_id, agent, decision, body, prev_hash, hash"
_REAP_BATCH = 500


class Cursor(Protocol):
    """The part of a DB-API cursor the store uses (sqlite3 and psycopg both fit)."""

    @property
    def rowcount(self) -> int: ...

    def execute(self, sql: Any, params: Any = ..., /) -> Any: ...

    def executemany(self, sql: Any, params: Any, /) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class SqlStore(ABC):
    """The Interlock store over one SQL database. Thread-safe; one per process.

    ``clock`` returns microseconds since the epoch (tests pass a fake one).
    """

    #: The SQL function for the larger of two values.
    greatest = "MAX"
    #: Appended to a SELECT that must lock the rows it reads.
    for_update = ""
    #: Appended to the reaper's SELECT so that replicas share the work.
    skip_locked = ""

    def __init__(self, *, clock: Callable[[], int] | None = None) -> None:
        self.clock: Callable[[], int] = clock or now_us
        self.audit_key = audit_key()
        self._approval_waiters = _Waiters()
        self._closed = False

    # -- back-end hooks ----------------------------------------------------------------

    @property
    @abstractmethod
    def url(self) -> str:
        """The database URL, with any password hidden."""

    @abstractmethod
    def transaction(self, *, write: bool = True) -> AbstractContextManager[Cursor]:
        """A transaction; a write transaction holds the write lock from its start on
        back ends that lock the whole database."""

    @abstractmethod
    def q(self, sql: str) -> str:
        """``sql`` written with ``?`` placeholders, in this back end's style."""

    @abstractmethod
    def migrate(self) -> list[str]:
        """Apply pending migrations; return the names applied."""

    @abstractmethod
    def migration_status(self) -> list[tuple[int, str, bool]]:
        """(version, name, applied) for every migration this Interlock knows."""

    @abstractmethod
    def wait_for_approval(self, approval_id: str, timeout: float) -> ApprovalRecord:
        """Block until the approval leaves ``pending`` or ``timeout`` passes; return it."""

    @abstractmethod
    async def await_approval(self, approval_id: str, timeout: float) -> ApprovalRecord:
        """The async twin of :meth:`wait_for_approval`."""

    def poll_for_approval(
        self,
        approval_id: str,
        timeout: float,
        *,
        max_delay: float = 0.1,
        first_delay: float = 0.002,
    ) -> ApprovalRecord:
        """Wait by re-reading with backoff (``first_delay``, doubling to ``max_delay``);
        a decision made through this store object, or announced to it, wakes the
        waiter at once."""
        deadline = time.monotonic() + timeout
        with self._approval_waiters.wait(approval_id) as woken:
            delay = first_delay
            while True:
                record = self.get_approval(approval_id)
                remaining = deadline - time.monotonic()
                if record.status is not ApprovalStatus.PENDING or remaining <= 0:
                    return record
                woken.wait(min(delay, remaining))
                woken.clear()
                delay = min(delay * 2, max_delay)

    async def apoll_for_approval(
        self,
        approval_id: str,
        timeout: float,
        *,
        max_delay: float = 0.05,
        first_delay: float = 0.002,
    ) -> ApprovalRecord:
        """The async twin of :meth:`poll_for_approval`."""
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()

        def wake() -> None:
            loop.call_soon_threadsafe(woken.set)

        deadline = time.monotonic() + timeout
        self._approval_waiters.register(approval_id, wake)
        try:
            delay = first_delay
            while True:
                record = await asyncio.to_thread(self.get_approval, approval_id)
                remaining = deadline - time.monotonic()
                if record.status is not ApprovalStatus.PENDING or remaining <= 0:
                    return record
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), min(delay, remaining))
                woken.clear()
                delay = min(delay * 2, max_delay)
        finally:
            self._approval_waiters.unregister(approval_id, wake)

    def notify_decided(self, cur: Cursor, approval_id: str) -> None:  # noqa: B027
        """Called inside the transaction that decides an approval (PostgreSQL NOTIFYs)."""

    def _migrate_on_open(self) -> None:
        """Migrate while opening; a refused open leaves no connection behind."""
        try:
            self.migrate()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> SqlStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- audit -------------------------------------------------------------------------

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

    # -- approvals ---------------------------------------------------------------------

    def resolve_approval(
        self,
        *,
        tenant: str,
        intent_hash: str,
        action: Mapping[str, Any],
        context: Mapping[str, Any],
        rule_ids: Sequence[str],
        reason: str,
        requested_by: str | None,
        ttl_us: int,
        grant_ttl_us: int,
    ) -> ClaimOutcome:
        """For a call that needs approval: claim an approved grant for this exact
        intent (atomically, once), or find the pending request, or a standing denial,
        or open a new pending request."""
        now = self.clock()
        with self.transaction(write=True) as cur:
            self._expire_intent(cur, tenant, intent_hash, now)
            cur.execute(
                self.q(
                    "UPDATE approvals SET status = 'claimed', claimed_us = ? "
                    "WHERE tenant = ? AND intent_hash = ? AND status = 'approved' "
                    "AND expires_us > ? "
                    f"RETURNING {APPROVAL_COLUMNS}"
                ),
                (now, tenant, intent_hash, now),
            )
            row = cur.fetchone()
            if row is not None:
                return ClaimOutcome(ApprovalStatus.CLAIMED, ApprovalRecord.from_row(row))
            found = self._open_or_denied(cur, tenant, intent_hash, now)
            if found is not None:
                return found
            approval_id = "apr_" + secrets.token_hex(12)
            cur.execute(
                self.q(
                    f"INSERT INTO approvals ({APPROVAL_COLUMNS}, grant_ttl_us) "
                    "VALUES (?, ?, ?, 'pending', ?, ?, ?, ?, ?, NULL, NULL, ?, ?, NULL, NULL, ?) "
                    "ON CONFLICT (tenant, intent_hash) WHERE status IN ('pending', 'approved') "
                    f"DO NOTHING RETURNING {APPROVAL_COLUMNS}"
                ),
                (
                    approval_id,
                    tenant,
                    intent_hash,
                    _json(action),
                    _json(context),
                    _json(list(rule_ids)),
                    reason,
                    requested_by,
                    now,
                    now + ttl_us,
                    grant_ttl_us,
                ),
            )
            row = cur.fetchone()
            if row is not None:
                record = ApprovalRecord.from_row(row)
                return ClaimOutcome(ApprovalStatus.PENDING, record, created=True)
            # Another replica opened it between our look and our insert.
            found = self._open_or_denied(cur, tenant, intent_hash, now)
            if found is None:  # pragma: no cover - the conflict proves a row exists
                raise RuntimeError("approval vanished while it was being opened")
            return found

    def _open_or_denied(
        self, cur: Cursor, tenant: str, intent_hash: str, now: int
    ) -> ClaimOutcome | None:
        cur.execute(
            self.q(
                f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE tenant = ? AND intent_hash = ? "
                "AND status IN ('pending', 'denied') AND expires_us > ? "
                "ORDER BY created_us DESC LIMIT 1"
            ),
            (tenant, intent_hash, now),
        )
        row = cur.fetchone()
        if row is None:
            return None
        record = ApprovalRecord.from_row(row)
        return ClaimOutcome(record.status, record)

    def _expire_intent(self, cur: Cursor, tenant: str, intent_hash: str, now: int) -> None:
        cur.execute(
            self.q(
                "UPDATE approvals SET status = 'expired' WHERE tenant = ? AND intent_hash = ? "
                "AND status IN ('pending', 'approved') AND expires_us <= ?"
            ),
            (tenant, intent_hash, now),
        )

    def unclaim_approval(self, approval_id: str) -> bool:
        """Give a claimed grant back (the call it was claimed for did not run after
        all). False when it cannot be: another request for the intent is open, or it
        was not claimed. A database failure raises."""
        with self.transaction(write=True) as cur:
            cur.execute(
                self.q(
                    "UPDATE approvals SET status = 'approved', claimed_us = NULL "
                    "WHERE id = ? AND status = 'claimed' AND NOT EXISTS ("
                    "SELECT 1 FROM approvals AS open WHERE open.tenant = approvals.tenant "
                    "AND open.intent_hash = approvals.intent_hash "
                    "AND open.status IN ('pending', 'approved'))"
                ),
                (approval_id,),
            )
            return cur.rowcount == 1

    def get_approval(self, approval_id: str, *, tenant: str | None = None) -> ApprovalRecord:
        with self.transaction(write=False) as cur:
            record = self._read_approval(cur, approval_id, tenant)
        return _as_of(record, self.clock())

    def _read_approval(self, cur: Cursor, approval_id: str, tenant: str | None) -> ApprovalRecord:
        cur.execute(
            self.q(f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = ?{self.for_update}"),
            (approval_id,),
        )
        row = cur.fetchone()
        if row is None or (tenant is not None and row[1] != tenant):
            raise ApprovalNotFound(f"no approval {approval_id!r}", approval_id=approval_id)
        return ApprovalRecord.from_row(row)

    def list_approvals(
        self,
        *,
        tenant: str | None = None,
        status: ApprovalStatus | str | None = None,
        limit: int = 100,
    ) -> list[ApprovalRecord]:
        """Approvals, newest first. A pending or approved one past its expiry shows as
        expired."""
        now = self.clock()
        where: list[str] = []
        params: list[Any] = []
        if tenant is not None:
            where.append("tenant = ?")
            params.append(tenant)
        wanted = ApprovalStatus(status) if status is not None else None
        if wanted in (ApprovalStatus.PENDING, ApprovalStatus.APPROVED):
            where.append("status = ? AND expires_us > ?")
            params.extend((wanted.value, now))
        elif wanted is ApprovalStatus.EXPIRED:
            where.append(
                "(status = 'expired' OR (status IN ('pending', 'approved') AND expires_us <= ?))"
            )
            params.append(now)
        elif wanted is not None:
            where.append("status = ?")
            params.append(wanted.value)
        sql = f"SELECT {APPROVAL_COLUMNS} FROM approvals"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY created_us DESC, id LIMIT {int(limit)}"
        with self.transaction(write=False) as cur:
            cur.execute(self.q(sql), params)
            records = [ApprovalRecord.from_row(row) for row in cur.fetchall()]
        return [_as_of(r, now) for r in records]

    def approve(
        self, approval_id: str, *, by: str, reason: str = "", tenant: str | None = None
    ) -> ApprovalRecord:
        """Approve a pending request: the identical call, retried, may then run once.
        Refuses the requester itself, and anything no longer pending."""
        return self._decide(approval_id, ApprovalStatus.APPROVED, by, reason, tenant)

    def deny(
        self, approval_id: str, *, by: str, reason: str = "", tenant: str | None = None
    ) -> ApprovalRecord:
        """Deny a pending request: the identical call is denied until the denial
        lapses (the policy's ``grant_ttl``)."""
        return self._decide(approval_id, ApprovalStatus.DENIED, by, reason, tenant)

    def _decide(
        self,
        approval_id: str,
        status: ApprovalStatus,
        by: str,
        reason: str,
        tenant: str | None,
    ) -> ApprovalRecord:
        approver = by.strip() if isinstance(by, str) else ""
        if not approver:
            raise SelfApproval(
                "an approver identity is required to decide an approval", approval_id=approval_id
            )
        now = self.clock()
        lapsed = False
        with self.transaction(write=True) as cur:
            record = self._read_approval(cur, approval_id, tenant)
            if _same_identity(record.requested_by, approver):
                raise SelfApproval(
                    f"{approver!r} requested approval {approval_id} and cannot decide it",
                    approval_id=approval_id,
                )
            if record.status is not ApprovalStatus.PENDING:
                raise ApprovalClosed(
                    f"approval {approval_id} is {record.status.value}, not pending",
                    approval_id=approval_id,
                )
            if record.expires_us <= now:
                # Marked expired here, and refused once this transaction has committed.
                cur.execute(
                    self.q(
                        "UPDATE approvals SET status = 'expired' "
                        "WHERE id = ? AND status = 'pending'"
                    ),
                    (approval_id,),
                )
                lapsed = True
            else:
                cur.execute(
                    self.q(
                        "UPDATE approvals SET status = ?, decided_by = ?, decision_reason = ?, "
                        "decided_us = ?, expires_us = ? + grant_ttl_us "
                        f"WHERE id = ? AND status = 'pending' RETURNING {APPROVAL_COLUMNS}"
                    ),
                    (status.value, approver, reason, now, now, approval_id),
                )
                row = cur.fetchone()
                if row is None:  # pragma: no cover - the row is locked by the read above
                    raise ApprovalClosed(
                        f"approval {approval_id} was decided meanwhile", approval_id=approval_id
                    )
                decided = ApprovalRecord.from_row(row)
                self._append(cur, [_approval_entry(decided)])
                self.notify_decided(cur, approval_id)
        if lapsed:
            raise ApprovalClosed(
                f"approval {approval_id} expired before it was decided", approval_id=approval_id
            )
        self._approval_waiters.wake(approval_id)
        return decided

    # -- budgets -----------------------------------------------------------------------

    def reserve(
        self,
        *,
        tenant: str,
        idempotency_key: str,
        lines: Sequence[BudgetLine],
        ttl_us: int,
        force: bool = False,
    ) -> ReserveOutcome:
        """Reserve ``amount`` on every line at once, or on none. A line whose budget
        cannot take it refuses the whole reservation (``force`` records it anyway:
        an approved overspend). The same ``idempotency_key`` returns the first
        reservation again (``replayed``) and reserves nothing more."""
        now = self.clock()
        ordered = sorted(lines, key=lambda line: line.key)  # one lock order: no deadlock
        if not force:
            for line in ordered:
                if line.amount > line.cap:
                    return ReserveOutcome(None, Refusal(line, spent=0, reserved=0))
        reservation_id = "res_" + secrets.token_hex(12)
        try:
            return self._reserve(
                tenant, idempotency_key, reservation_id, ordered, now, ttl_us, force
            )
        except _Refused as refused:  # raised inside the transaction: it rolled back
            return ReserveOutcome(None, refused.refusal)

    def _reserve(
        self,
        tenant: str,
        idempotency_key: str,
        reservation_id: str,
        ordered: list[BudgetLine],
        now: int,
        ttl_us: int,
        force: bool,
    ) -> ReserveOutcome:
        with self.transaction(write=True) as cur:
            cur.execute(
                self.q(
                    f"INSERT INTO reservations ({_RESERVATION_COLUMNS}) "
                    "VALUES (?, ?, ?, 'reserved', ?, ?, ?, NULL, NULL) "
                    "ON CONFLICT (tenant, idempotency_key) DO NOTHING RETURNING id"
                ),
                (
                    reservation_id,
                    tenant,
                    idempotency_key,
                    _lines_json(ordered),
                    now,
                    now + ttl_us,
                ),
            )
            if cur.fetchone() is None:
                cur.execute(
                    self.q(
                        f"SELECT {_RESERVATION_COLUMNS} FROM reservations "
                        "WHERE tenant = ? AND idempotency_key = ?"
                    ),
                    (tenant, idempotency_key),
                )
                return ReserveOutcome(_reservation(cur.fetchone(), replayed=True))
            for line in ordered:
                if not self._take(cur, tenant, line, now, force):
                    refusal = self._refusal(cur, tenant, line)
                    raise _Refused(refusal)
            return ReserveOutcome(
                Reservation(
                    id=reservation_id,
                    tenant=tenant,
                    idempotency_key=idempotency_key,
                    status=ReservationStatus.RESERVED,
                    lines=tuple(ordered),
                    created_us=now,
                    expires_us=now + ttl_us,
                )
            )

    def _take(self, cur: Cursor, tenant: str, line: BudgetLine, now: int, force: bool) -> bool:
        """The one conditional statement that reserves on one budget."""
        condition = (
            ""
            if force
            else (" WHERE budgets.spent + budgets.reserved + excluded.reserved <= excluded.cap")
        )
        cur.execute(
            self.q(
                "INSERT INTO budgets (tenant, budget_id, scope_key, window_start, unit, cap, "
                "spent, reserved, overage, updated_us) VALUES (?, ?, ?, ?, ?, ?, 0, ?, 0, ?) "
                "ON CONFLICT (tenant, budget_id, scope_key, window_start) DO UPDATE SET "
                "reserved = budgets.reserved + excluded.reserved, cap = excluded.cap, "
                "unit = excluded.unit, updated_us = excluded.updated_us"
                f"{condition} RETURNING 1"
            ),
            (
                tenant,
                line.budget_id,
                line.scope_key,
                line.window_start,
                line.unit,
                line.cap,
                line.amount,
                now,
            ),
        )
        return cur.fetchone() is not None

    def _refusal(self, cur: Cursor, tenant: str, line: BudgetLine) -> Refusal:
        cur.execute(
            self.q(
                "SELECT spent, reserved FROM budgets WHERE tenant = ? AND budget_id = ? "
                "AND scope_key = ? AND window_start = ?"
            ),
            (tenant, line.budget_id, line.scope_key, line.window_start),
        )
        row = cur.fetchone()
        spent, reserved = (int(row[0]), int(row[1])) if row else (0, 0)
        return Refusal(line, spent=spent, reserved=reserved)

    def commit(self, reservation_id: str, actual: Mapping[str, int] | None = None) -> Reservation:
        """Spend a reservation. ``actual`` maps budget id → units really used (it may
        exceed the reservation: the excess is recorded as overage); a budget left out
        is charged what was reserved. Committing twice changes nothing; committing
        one the reaper already expired still charges what was spent (late)."""
        now = self.clock()
        with self.transaction(write=True) as cur:
            reservation = self._read_reservation(cur, reservation_id)
            status = reservation.status
            if status is ReservationStatus.COMMITTED:
                return _replayed(reservation)
            if status is ReservationStatus.RELEASED:
                raise ReservationClosed(
                    f"reservation {reservation_id} was released; it cannot be committed",
                    reservation_id=reservation_id,
                )
            spent = {
                line.budget_id: max(0, int((actual or {}).get(line.budget_id, line.amount)))
                for line in reservation.lines
            }
            still_reserved = status is ReservationStatus.RESERVED
            cur.execute(
                self.q(
                    "UPDATE reservations SET status = 'committed', settled_us = ?, actual = ? "
                    "WHERE id = ?"
                ),
                (now, _json(spent), reservation_id),
            )
            # The budget rows last: a hot budget stays locked for the least time.
            for line in reservation.lines:
                used = spent[line.budget_id]
                cur.execute(
                    self.q(
                        "UPDATE budgets SET reserved = reserved - ?, spent = spent + ?, "
                        "overage = overage + ?, updated_us = ? WHERE tenant = ? AND budget_id = ? "
                        "AND scope_key = ? AND window_start = ?"
                    ),
                    (
                        line.amount if still_reserved else 0,
                        used,
                        # Spend beyond what was reserved; a late commit had its
                        # reservation given back already, so all of it is beyond.
                        max(0, used - line.amount) if still_reserved else used,
                        now,
                        reservation.tenant,
                        line.budget_id,
                        line.scope_key,
                        line.window_start,
                    ),
                )
        # The row is locked and read above: what it now holds is known.
        return replace(
            reservation, status=ReservationStatus.COMMITTED, settled_us=now, actual=spent
        )

    def release(self, reservation_id: str) -> Reservation:
        """Return a reservation's amounts to its budgets. Releasing twice (or one the
        reaper expired) changes nothing; a committed one cannot be released."""
        now = self.clock()
        with self.transaction(write=True) as cur:
            reservation = self._read_reservation(cur, reservation_id)
            if reservation.status in (ReservationStatus.RELEASED, ReservationStatus.EXPIRED):
                return _replayed(reservation)
            if reservation.status is ReservationStatus.COMMITTED:
                raise ReservationClosed(
                    f"reservation {reservation_id} was committed; it cannot be released",
                    reservation_id=reservation_id,
                )
            return self._give_back(cur, reservation, ReservationStatus.RELEASED, now)

    def _give_back(
        self, cur: Cursor, reservation: Reservation, status: ReservationStatus, now: int
    ) -> Reservation:
        return self._give_back_all(cur, [reservation], status, now)[0]

    def _give_back_all(
        self,
        cur: Cursor,
        reservations: Sequence[Reservation],
        status: ReservationStatus,
        now: int,
    ) -> list[Reservation]:
        """Return reservations' amounts to their budgets, touching each budget once and
        in the same (sorted) order as ``reserve`` locks them: no deadlock."""
        owed: dict[tuple[str, str, str, int], int] = {}
        for reservation in reservations:
            for line in reservation.lines:
                key = (reservation.tenant, line.budget_id, line.scope_key, line.window_start)
                owed[key] = owed.get(key, 0) + line.amount
        cur.executemany(
            self.q("UPDATE reservations SET status = ?, settled_us = ? WHERE id = ?"),
            [(status.value, now, reservation.id) for reservation in reservations],
        )
        cur.executemany(  # the budget rows last: a hot budget stays locked the least
            self.q(
                "UPDATE budgets SET reserved = reserved - ?, updated_us = ? WHERE tenant = ? "
                "AND budget_id = ? AND scope_key = ? AND window_start = ?"
            ),
            [(owed[key], now, *key) for key in sorted(owed)],
        )
        return [replace(r, status=status, settled_us=now) for r in reservations]

    def get_reservation(self, reservation_id: str) -> Reservation:
        with self.transaction(write=False) as cur:
            return self._read_reservation(cur, reservation_id, lock=False)

    def _read_reservation(
        self, cur: Cursor, reservation_id: str, *, lock: bool = True
    ) -> Reservation:
        cur.execute(
            self.q(
                f"SELECT {_RESERVATION_COLUMNS} FROM reservations WHERE id = ?"
                f"{self.for_update if lock else ''}"
            ),
            (reservation_id,),
        )
        row = cur.fetchone()
        if row is None:
            raise ReservationNotFound(
                f"no reservation {reservation_id!r}", reservation_id=reservation_id
            )
        return _reservation(row)

    def budget_rows(
        self, *, tenant: str | None = None, budget_id: str | None = None
    ) -> list[BudgetRow]:
        where: list[str] = []
        params: list[Any] = []
        if tenant is not None:
            where.append("tenant = ?")
            params.append(tenant)
        if budget_id is not None:
            where.append("budget_id = ?")
            params.append(budget_id)
        sql = (
            "SELECT tenant, budget_id, scope_key, window_start, unit, cap, spent, reserved, "
            "overage, updated_us FROM budgets"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY tenant, budget_id, scope_key, window_start"
        with self.transaction(write=False) as cur:
            cur.execute(self.q(sql), params)
            return [
                BudgetRow(
                    str(r[0]),
                    str(r[1]),
                    str(r[2]),
                    int(r[3]),
                    str(r[4]),
                    int(r[5]),
                    int(r[6]),
                    int(r[7]),
                    int(r[8]),
                    int(r[9]),
                )
                for r in cur.fetchall()
            ]

    def reap(self, *, now: int | None = None) -> ReapResult:
        """Release reservations past their TTL and expire lapsed approvals."""
        now = self.clock() if now is None else now
        released = 0
        while True:
            with self.transaction(write=True) as cur:
                cur.execute(
                    self.q(
                        f"SELECT {_RESERVATION_COLUMNS} FROM reservations "
                        "WHERE status = 'reserved' "
                        f"AND expires_us <= ? ORDER BY expires_us LIMIT {_REAP_BATCH}"
                        f"{self.skip_locked}"
                    ),
                    (now,),
                )
                batch = [_reservation(row) for row in cur.fetchall()]
                if batch:
                    self._give_back_all(cur, batch, ReservationStatus.EXPIRED, now)
            released += len(batch)
            if len(batch) < _REAP_BATCH:
                break
        with self.transaction(write=True) as cur:
            cur.execute(
                self.q(
                    "UPDATE approvals SET status = 'expired' "
                    "WHERE status IN ('pending', 'approved') AND expires_us <= ?"
                ),
                (now,),
            )
            expired = max(cur.rowcount, 0)
        return ReapResult(reservations=released, approvals=expired)

    # -- rate limits -------------------------------------------------------------------

    def rate_acquire(
        self, *, tenant: str, limit_id: str, key: str, interval_us: int, window_us: int
    ) -> RateOutcome:
        """Take one slot of a smoothed rate limit (GCRA), atomically: allowed when the
        key's theoretical arrival time, pushed one interval on, stays within the
        window from now."""
        now = self.clock()
        g = self.greatest
        with self.transaction(write=True) as cur:
            cur.execute(
                self.q(
                    "INSERT INTO rate_counters (tenant, limit_id, key, tat_us) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (tenant, limit_id, key) DO UPDATE SET "
                    f"tat_us = {g}(rate_counters.tat_us, ?) + ? "
                    f"WHERE {g}(rate_counters.tat_us, ?) + ? - ? <= ? RETURNING tat_us"
                ),
                (
                    tenant,
                    limit_id,
                    key,
                    now + interval_us,
                    now,
                    interval_us,
                    now,
                    interval_us,
                    now,
                    window_us,
                ),
            )
            if cur.fetchone() is not None:
                return RateOutcome(True)
            cur.execute(
                self.q(
                    "SELECT tat_us FROM rate_counters WHERE tenant = ? AND limit_id = ? AND key = ?"
                ),
                (tenant, limit_id, key),
            )
            row = cur.fetchone()
        tat = int(row[0]) if row else now
        return RateOutcome(False, retry_after=max(0.0, (tat + interval_us - now - window_us) / 1e6))


class _Refused(Exception):
    """Rolls a reservation's transaction back and carries the refusal out."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__("refused")
        self.refusal = refusal


class _Waiters:
    """Callbacks of threads and tasks waiting for an approval to be decided; a
    decision made in this process (or announced by the database) calls them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: dict[str, set[Callable[[], object]]] = {}

    def register(self, approval_id: str, callback: Callable[[], object]) -> None:
        with self._lock:
            self._callbacks.setdefault(approval_id, set()).add(callback)

    def unregister(self, approval_id: str, callback: Callable[[], object]) -> None:
        with self._lock:
            callbacks = self._callbacks.get(approval_id)
            if callbacks is not None:
                callbacks.discard(callback)
                if not callbacks:
                    del self._callbacks[approval_id]

    def wake(self, approval_id: str) -> None:
        with self._lock:
            callbacks = list(self._callbacks.get(approval_id, ()))
        for callback in callbacks:
            with contextlib.suppress(RuntimeError):  # a waiter's event loop has closed
                callback()

    def wake_all(self) -> None:
        """Every waiter re-reads (announcements may have been missed)."""
        with self._lock:
            callbacks = [callback for group in self._callbacks.values() for callback in group]
        for callback in callbacks:
            with contextlib.suppress(RuntimeError):
                callback()

    def wait(self, approval_id: str) -> _Waiting:
        return _Waiting(self, approval_id)


class _Waiting:
    """One thread's registration: ``with waiters.wait(id) as event: ...``."""

    def __init__(self, waiters: _Waiters, approval_id: str) -> None:
        self.waiters = waiters
        self.approval_id = approval_id
        self.event = threading.Event()

    def __enter__(self) -> threading.Event:
        self.waiters.register(self.approval_id, self.event.set)
        return self.event

    def __exit__(self, *exc: object) -> None:
        self.waiters.unregister(self.approval_id, self.event.set)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def _lines_json(lines: Sequence[BudgetLine]) -> str:
    return _json(
        [
            [line.budget_id, line.scope_key, line.window_start, line.unit, line.cap, line.amount]
            for line in lines
        ]
    )


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


_REDACTOR = Redactor()


def _approval_entry(record: ApprovalRecord) -> AuditEntry:
    """The audit record of an approval decided: kind ``approval``, the approver as
    its agent, committed in the same transaction as the decision."""
    body = encode_body(
        {
            "kind": "approval",
            "approval_id": record.id,
            "intent_hash": record.intent_hash,
            "status": record.status.value,
            "decided_by": record.decided_by,
            "reason": _REDACTOR.redact(record.decision_reason or ""),
            "rule_ids": list(record.rule_ids),
        }
    )
    ts_us = record.decided_us if record.decided_us is not None else record.created_us
    return (record.tenant, ts_us, "approval", None, record.decided_by, None, body)


def _same_identity(requested_by: str | None, approver: str) -> bool:
    """Whether the approver is the requester: compared trimmed and case-folded, so
    ``"Bot "`` cannot approve what ``"bot"`` asked for."""
    return requested_by is not None and requested_by.strip().casefold() == approver.casefold()


def _as_of(record: ApprovalRecord, now: int) -> ApprovalRecord:
    """The record as it stands at ``now``: an open one past its expiry is expired,
    whether or not the reaper has marked it yet."""
    lapsed = record.status in (ApprovalStatus.PENDING, ApprovalStatus.APPROVED)
    if lapsed and record.expires_us <= now:
        return replace(record, status=ApprovalStatus.EXPIRED)
    return record


def _reservation(row: Any, *, replayed: bool = False) -> Reservation:
    lines = tuple(
        BudgetLine(str(b), str(s), int(w), str(u), int(c), int(a))
        for b, s, w, u, c, a in json.loads(row[4])
    )
    return Reservation(
        id=str(row[0]),
        tenant=str(row[1]),
        idempotency_key=str(row[2]),
        status=ReservationStatus(row[3]),
        lines=lines,
        created_us=int(row[5]),
        expires_us=int(row[6]),
        settled_us=None if row[7] is None else int(row[7]),
        actual=None if row[8] is None else {k: int(v) for k, v in json.loads(row[8]).items()},
        replayed=replayed,
    )


def _replayed(reservation: Reservation) -> Reservation:
    return replace(reservation, replayed=True)
