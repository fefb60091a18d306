"""Budget leases in SQL (``docs/adr/0012-budget-leases.md``): a store instance takes a
slice of a hot budget counter (counted there as reserved), serves reservations from
it with one uncontended statement each, and folds what they spent back into the
counter when it tops the slice up or returns it. A lease whose holder stopped
renewing it is closed by the reaper: what its settled reservations charged is spent,
its reservations in flight become ordinary ones on the counter, the rest is free.

Lock order, everywhere: the lease row, then reservation rows, then the budget row.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Final

from interlock.ledger.leases import Lease, LeaseBook
from interlock.store.lease_writer import LeaseWriter, Row
from interlock.store.records import BudgetLine, Reservation
from interlock.store.settle import CEILING
from interlock.store.sql_base import Cursor, StoreBase, compact_json

__all__ = ["LeaseStore", "lines_json", "quoted"]

_REAP_LEASES = 100


class LeaseStore(StoreBase):
    """The lease half of the budget store; :class:`~.sql_budgets.BudgetStore` calls it."""

    #: The SQL function for the smaller of two values.
    least = "MIN"
    #: Appended to the subquery that pins a lease while a reservation is written on it.
    key_share = ""
    #: Whether lease rows are written by the group commit of :mod:`.lease_writer`.
    lease_batches = False
    leases: LeaseBook | None = None

    def lease_budgets(
        self,
        slices: Mapping[str, int],
        *,
        ttl: float = 30.0,
        idle: float = 5.0,
        max_age: float = 120.0,
    ) -> LeaseBook:
        """Serve the budgets named in ``slices`` (budget id → units a lease takes at a
        time) from leases held by this instance. ``ttl`` (seconds): how long a lease
        outlives its holder's last renewal before the reaper may close it; ``idle``:
        a lease unused this long is returned; ``max_age``: a lease is returned this
        long after its grant even when busy."""
        self.leases = LeaseBook(
            dict(slices),
            ttl_us=int(ttl * 1e6),
            idle_us=int(idle * 1e6),
            max_age_us=int(max_age * 1e6),
        )
        return self.leases

    # -- the holder's side ---------------------------------------------------------------

    def _lease_grant(
        self, book: LeaseBook, tenant: str, line: BudgetLine, now: int
    ) -> Lease | None:
        """A new lease of ``slice`` units on ``line``'s counter, if it can hold them
        (and is not closed)."""
        wanted = book.slice_for(line)
        assert wanted is not None
        units = min(wanted, line.cap)
        if units < line.held:
            return None
        lease = Lease(
            id="lease_" + secrets.token_hex(12),
            key=(tenant, *line.key),
            free=units,
            granted_us=now,
            expires_us=now + book.ttl_us,
            last_used_us=now,
        )
        with self.transaction(write=True) as cur:
            cur.execute(
                self.q(
                    "INSERT INTO budgets (tenant, budget_id, scope_key, window_start, unit, cap, "
                    "spent, reserved, headroom, overage, excess, updated_us) "
                    "SELECT ?, ?, ?, CAST(? AS BIGINT), ?, CAST(? AS BIGINT), 0, "
                    "CAST(? AS BIGINT), 0, 0, 0, CAST(? AS BIGINT) WHERE NOT EXISTS (SELECT 1 "
                    "FROM budget_closures WHERE tenant = ? AND budget_id = ? AND scope_key = ?) "
                    "ON CONFLICT (tenant, budget_id, scope_key, window_start) DO UPDATE SET "
                    "reserved = budgets.reserved + excluded.reserved, cap = excluded.cap, "
                    "unit = excluded.unit, updated_us = excluded.updated_us "
                    "WHERE budgets.spent + budgets.reserved + budgets.headroom "
                    "+ excluded.reserved <= excluded.cap RETURNING 1"
                ),
                (
                    tenant,
                    line.budget_id,
                    line.scope_key,
                    line.window_start,
                    line.unit,
                    line.cap,
                    units,
                    now,
                    tenant,
                    line.budget_id,
                    line.scope_key,
                ),
            )
            if cur.fetchone() is None:
                return None
            cur.execute(
                self.q(
                    "INSERT INTO budget_leases (id, tenant, budget_id, scope_key, window_start, "
                    "owner, granted, expires_us, updated_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                (lease.id, tenant, *line.key, book.owner, units, lease.expires_us, now),
            )
        book.add(lease)
        return lease

    def _lease_top_up(
        self, book: LeaseBook, lease: Lease, line: BudgetLine, now: int
    ) -> int | None:
        """Fold what the lease's settled reservations charged into the counter, renew
        the lease, and take another slice if the counter can hold it: the units taken
        (0: the counter is full), or ``None`` when the lease is gone (closed by the
        reaper)."""
        wanted = book.slice_for(line)
        assert wanted is not None
        units = min(wanted, line.cap)
        tenant = lease.key[0]
        with self.transaction(write=True) as cur:
            if not self._lock_lease(cur, lease.id):
                grown = None
            else:
                self._fold(cur, lease.id, tenant, line.key, detach_in_flight=False, now=now)
                cur.execute(
                    self.q(
                        "UPDATE budgets SET reserved = reserved + ?, updated_us = ? "
                        "WHERE tenant = ? AND budget_id = ? AND scope_key = ? "
                        "AND window_start = ? AND spent + reserved + headroom + ? <= ? "
                        "AND NOT EXISTS (SELECT 1 FROM budget_closures c WHERE c.tenant = ? "
                        "AND c.budget_id = ? AND c.scope_key = ?)"
                    ),
                    (
                        units,
                        now,
                        tenant,
                        *line.key,
                        units,
                        line.cap,
                        tenant,
                        line.budget_id,
                        line.scope_key,
                    ),
                )
                grown = units if cur.rowcount == 1 else 0
                cur.execute(
                    self.q(
                        "UPDATE budget_leases SET granted = granted + ?, expires_us = ?, "
                        "updated_us = ? WHERE id = ?"
                    ),
                    (grown, now + book.ttl_us, now, lease.id),
                )
        if grown is None:
            with book.closing(lease):
                pass
            return None
        book.grew(lease, grown, now)
        return grown

    def _lease_insert(self, reservation: Reservation, lease: Lease, line: BudgetLine) -> bool:
        """Write a reservation served from ``lease``: one statement, on no shared row
        (on PostgreSQL gathered with other threads' into one: :mod:`.lease_writer`).
        False when the key was used before, the lease is gone or the budget closed."""
        if self.lease_batches:
            return self._lease_writer.insert(
                (
                    reservation.id,
                    reservation.tenant,
                    reservation.idempotency_key,
                    lines_json((line,)),
                    reservation.created_us,
                    reservation.expires_us,
                    reservation.owner,
                    lease.id,
                    line.amount,
                    line.held,
                    line.budget_id,
                    line.scope_key,
                )
            )
        with self.single_statement() as cur:
            cur.execute(
                self.q(
                    "INSERT INTO reservations (id, tenant, idempotency_key, status, lines, "
                    "created_us, expires_us, owner, lease_id, lease_amount, lease_held) "
                    "SELECT ?, ?, ?, 'reserved', ?, CAST(? AS BIGINT), CAST(? AS BIGINT), ?, ?, "
                    "CAST(? AS BIGINT), CAST(? AS BIGINT) WHERE EXISTS (SELECT 1 FROM "
                    f"budget_leases WHERE id = ? AND expires_us > ?{self.key_share}) "
                    "AND NOT EXISTS (SELECT 1 FROM budget_closures WHERE tenant = ? AND "
                    "budget_id = ? AND scope_key = ?) "
                    "ON CONFLICT (tenant, idempotency_key) DO NOTHING RETURNING id"
                ),
                (
                    reservation.id,
                    reservation.tenant,
                    reservation.idempotency_key,
                    lines_json((line,)),
                    reservation.created_us,
                    reservation.expires_us,
                    reservation.owner,
                    lease.id,
                    line.amount,
                    line.held,
                    lease.id,
                    reservation.created_us,
                    reservation.tenant,
                    line.budget_id,
                    line.scope_key,
                ),
            )
            return cur.fetchone() is not None

    def _lease_settle(
        self, reservation: Reservation, lease: Lease, used: int | None, now: int
    ) -> bool:
        """Commit (``used`` units) or release (``None``) a reservation served from
        ``lease``, on its own row only. False: it is no longer in flight on the lease
        (settled or detached meanwhile): the general path decides."""
        budget_id = reservation.lines[0].budget_id
        if self.lease_batches:
            return self._lease_writer.settle(
                (
                    reservation.id,
                    "released" if used is None else "committed",
                    now,
                    None if used is None else compact_json({budget_id: used}),
                    0 if used is None else used,
                    lease.id,
                )
            )
        with self.single_statement() as cur:
            cur.execute(
                self.q(
                    "UPDATE reservations SET status = ?, settled_us = ?, actual = ?, "
                    "lease_used = ? WHERE id = ? AND status = 'reserved' AND lease_id = ?"
                ),
                (
                    "released" if used is None else "committed",
                    now,
                    None if used is None else compact_json({budget_id: used}),
                    0 if used is None else used,
                    reservation.id,
                    lease.id,
                ),
            )
            return cur.rowcount == 1

    @cached_property
    def _lease_writer(self) -> LeaseWriter:
        return LeaseWriter(self._lease_batch)

    def _lease_batch(self, inserts: Sequence[Row], settles: Sequence[Row]) -> set[str]:
        """Write leased reservations' rows and settle others', in one statement (a
        transaction of its own: one round trip); the ids of the rows it wrote. Each
        row keeps its own statement's conditions. The inserts run first (the lease
        rows they pin, then the reservation rows the settlements lock: the lock
        order of every lease transaction). PostgreSQL's SQL."""
        with self.single_statement() as cur:
            cur.execute(
                _batch_statement(len(inserts), len(settles)),
                [value for row in inserts for value in row]
                + [value for row in settles for value in row],
            )
            return {str(found[0]) for found in cur.fetchall()}

    def _lease_close(self, lease_id: str, now: int, *, expired_only: bool) -> bool:
        """Close a lease: fold what its settled reservations charged, hand its
        reservations in flight to the counter, free the rest. ``expired_only``: only
        if it is past its expiry (the reaper's case; a lease another replica is
        closing is skipped). False: nothing closed."""
        with self.transaction(write=True) as cur:
            cur.execute(
                self.q(
                    "SELECT tenant, budget_id, scope_key, window_start, granted FROM "
                    "budget_leases WHERE id = ?"
                    + (" AND expires_us <= ?" if expired_only else "")
                    + (self.skip_locked if expired_only else self.for_update)
                ),
                (lease_id, now) if expired_only else (lease_id,),
            )
            row = cur.fetchone()
            if row is None:
                return False
            tenant, key = str(row[0]), (str(row[1]), str(row[2]), int(row[3]))
            self._fold(
                cur, lease_id, tenant, key, detach_in_flight=True, now=now, granted=int(row[4])
            )
            cur.execute(self.q("DELETE FROM budget_leases WHERE id = ?"), (lease_id,))
        return True

    def _return_leases(self, now: int, *, everything: bool = False) -> int:
        """Close this instance's leases that are idle, old or near expiry (all of
        them, ``everything``); how many were closed."""
        book = self.leases
        if book is None:
            return 0
        closed = 0
        for lease in book.due(now, everything=everything):
            with book.closing(lease):
                closed += self._lease_close(lease.id, now, expired_only=False)
        return closed

    def _reap_leases(self, now: int) -> int:
        """Close every lease past its expiry: its holder stopped renewing it."""
        with self.transaction(write=False) as cur:
            cur.execute(
                self.q(
                    "SELECT id FROM budget_leases WHERE expires_us <= ? "
                    f"ORDER BY expires_us LIMIT {_REAP_LEASES}"
                ),
                (now,),
            )
            ids = [str(row[0]) for row in cur.fetchall()]
        return sum(self._lease_close(lease_id, now, expired_only=True) for lease_id in ids)

    # -- shared steps --------------------------------------------------------------------

    def _lock_lease(self, cur: Cursor, lease_id: str) -> bool:
        cur.execute(
            self.q(f"SELECT granted FROM budget_leases WHERE id = ?{self.for_update}"),
            (lease_id,),
        )
        return cur.fetchone() is not None

    def _fold(
        self,
        cur: Cursor,
        lease_id: str,
        tenant: str,
        key: tuple[str, str, int],
        *,
        detach_in_flight: bool,
        now: int,
        granted: int = 0,
    ) -> None:
        """Inside a transaction that locked the lease row: move what the lease's
        settled reservations charged from reserved to spent (and off the grant);
        with ``detach_in_flight``, also turn its reservations in flight into ordinary
        ones (their amount reserved, their headroom held) and take the whole grant
        off the counter — the lease is being closed."""
        held_amount = held_headroom = 0
        if detach_in_flight:  # first: no commit can slip between the two steps
            cur.execute(
                self.q(
                    "UPDATE reservations SET lease_id = NULL WHERE lease_id = ? "
                    "AND status = 'reserved' RETURNING lease_amount, lease_held"
                ),
                (lease_id,),
            )
            for amount, held in cur.fetchall():
                held_amount += int(amount)
                held_headroom += int(held) - int(amount)
        cur.execute(
            self.q(
                "UPDATE reservations SET lease_id = NULL WHERE lease_id = ? "
                "AND status <> 'reserved' RETURNING lease_used, lease_amount"
            ),
            (lease_id,),
        )
        used = overage = 0
        for spent, amount in cur.fetchall():
            used += int(spent)
            overage += max(0, int(spent) - int(amount))
        taken = granted - held_amount if detach_in_flight else used
        if not (taken or used or held_headroom):
            return
        least = self.least
        cur.execute(
            self.q(
                "UPDATE budgets SET reserved = reserved - ?, headroom = headroom + ?, "
                f"spent = {least}(spent + ?, {CEILING}), "
                f"overage = {least}(overage + ?, {CEILING}), updated_us = ? "
                "WHERE tenant = ? AND budget_id = ? AND scope_key = ? AND window_start = ?"
            ),
            (taken, held_headroom, used, overage, now, tenant, *key),
        )
        if not detach_in_flight:
            cur.execute(
                self.q("UPDATE budget_leases SET granted = granted - ? WHERE id = ?"),
                (used, lease_id),
            )

    def _detach(self, cur: Cursor, reservation: Reservation, lease_id: str, now: int) -> None:
        """Inside a transaction that locked the lease row, then the reservation's:
        turn a reservation in flight on the lease into an ordinary one on the counter
        (the general path then settles it as any other)."""
        line = reservation.lines[0]
        cur.execute(
            self.q("UPDATE reservations SET lease_id = NULL WHERE id = ?"), (reservation.id,)
        )
        cur.execute(
            self.q("UPDATE budget_leases SET granted = granted - ? WHERE id = ?"),
            (line.held, lease_id),
        )
        cur.execute(
            self.q(
                "UPDATE budgets SET reserved = reserved - ?, headroom = headroom + ?, "
                "updated_us = ? WHERE tenant = ? AND budget_id = ? AND scope_key = ? "
                "AND window_start = ?"
            ),
            (line.headroom, line.headroom, now, reservation.tenant, *line.key),
        )

    def _lease_of(self, cur: Cursor, reservation_id: str) -> str | None:
        cur.execute(self.q("SELECT lease_id FROM reservations WHERE id = ?"), (reservation_id,))
        row = cur.fetchone()
        return None if row is None or row[0] is None else str(row[0])


_INSERT_ROW: Final = (
    "(%s::text, %s::text, %s::text, %s::text, %s::bigint, %s::bigint, %s::text, %s::text, "
    "%s::bigint, %s::bigint, %s::text, %s::text)"
)
_SETTLE_ROW: Final = "(%s::text, %s::text, %s::bigint, %s::text, %s::bigint, %s::text)"
_INSERTS: Final = (
    "ins AS (INSERT INTO reservations (id, tenant, idempotency_key, status, lines, created_us, "
    "expires_us, owner, lease_id, lease_amount, lease_held) "
    "SELECT v.id, v.tenant, v.key, 'reserved', v.lines, v.created, v.expires, v.owner, v.lease, "
    "v.amount, v.held FROM (VALUES {rows}) AS v (id, tenant, key, lines, created, expires, "
    "owner, lease, amount, held, budget_id, scope_key) "
    "WHERE EXISTS (SELECT 1 FROM budget_leases l WHERE l.id = v.lease "
    "AND l.expires_us > v.created FOR KEY SHARE) "
    "AND NOT EXISTS (SELECT 1 FROM budget_closures c WHERE c.tenant = v.tenant "
    "AND c.budget_id = v.budget_id AND c.scope_key = v.scope_key) "
    "ON CONFLICT (tenant, idempotency_key) DO NOTHING RETURNING reservations.id)"
)
_SETTLES: Final = (
    "upd AS (UPDATE reservations r SET status = v.status, settled_us = v.settled, "
    "actual = v.actual, lease_used = v.used FROM (VALUES {rows}) AS v (id, status, settled, "
    "actual, used, lease) WHERE r.id = v.id AND r.status = 'reserved' AND r.lease_id = v.lease "
    "RETURNING r.id)"
)
_BATCH_SQL: dict[tuple[int, int], str] = {}


def _batch_statement(inserts: int, settles: int) -> str:
    """The statement for a batch of this shape (memoised: a steady load repeats a
    few). The inserts' part is read first, so it runs first."""
    key = (inserts, settles)
    sql = _BATCH_SQL.get(key)
    if sql is None:
        parts, reads = [], []
        if inserts:
            parts.append(_INSERTS.format(rows=", ".join([_INSERT_ROW] * inserts)))
            reads.append("SELECT id FROM ins")
        if settles:
            parts.append(_SETTLES.format(rows=", ".join([_SETTLE_ROW] * settles)))
            reads.append("SELECT id FROM upd")
        sql = "WITH " + ", ".join(parts) + " " + " UNION ALL ".join(reads)
        if len(_BATCH_SQL) < 1024:
            _BATCH_SQL[key] = sql
    return sql


def lines_json(lines: Sequence[BudgetLine]) -> str:
    """The lines as the store keeps them (what :func:`compact_json` makes of their
    fields, written directly: this runs on every reservation)."""
    if len(lines) == 1:  # the usual reservation: a budget's lines repeat, remembered
        line = lines[0]
        key = (
            line.budget_id,
            line.scope_key,
            line.window_start,
            line.unit,
            line.cap,
            line.amount,
            line.headroom,
        )
        done = _LINES.get(key)
        if done is None:
            done = (
                f"[[{quoted(line.budget_id)},{quoted(line.scope_key)},{int(line.window_start)},"
                f"{quoted(line.unit)},{int(line.cap)},{int(line.amount)},{int(line.headroom)}]]"
            )
            if len(_LINES) >= _QUOTED_KEPT:  # cleared, not grown (as quoted's)
                _LINES.clear()
            _LINES[key] = done
        return done
    return (
        "["
        + ",".join(
            f"[{quoted(line.budget_id)},{quoted(line.scope_key)},{int(line.window_start)},"
            f"{quoted(line.unit)},{int(line.cap)},{int(line.amount)},{int(line.headroom)}]"
            for line in lines
        )
        + "]"
    )


_QUOTED: dict[str, str] = {}
_LINES: dict[tuple[object, ...], str] = {}
_QUOTED_KEPT = 4_096


def quoted(text: str) -> str:
    """``json.dumps(text)``, remembered: budget ids, scope keys and units are few and
    said on every reservation. (A full memo is cleared, not grown: scope keys can be
    many, e.g. one per session.)"""
    done = _QUOTED.get(text)
    if done is None:
        done = json.dumps(text)
        if len(_QUOTED) >= _QUOTED_KEPT:
            _QUOTED.clear()
        _QUOTED[text] = done
    return done
