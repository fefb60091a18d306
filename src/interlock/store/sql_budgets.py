"""Budgets in SQL: all-or-nothing reservations by one conditional upsert per budget,
committed from actual usage or released exactly once, and the reaper that releases
what a crashed caller left reserved."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from interlock.errors import ReservationClosed, ReservationNotFound
from interlock.store.records import (
    BudgetLine,
    BudgetRow,
    ReapResult,
    Refusal,
    Reservation,
    ReservationStatus,
    ReserveOutcome,
)
from interlock.store.sql_base import Cursor, StoreBase, compact_json

__all__ = ["BudgetStore"]

_RESERVATION_COLUMNS = (
    "id, tenant, idempotency_key, status, lines, created_us, expires_us, settled_us, actual"
)
_REAP_BATCH = 500


class BudgetStore(StoreBase):
    """Reservations against the policy's budgets, and reaping them."""

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
                (now, compact_json(spent), reservation_id),
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


class _Refused(Exception):
    """Rolls a reservation's transaction back and carries the refusal out."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__("refused")
        self.refusal = refusal


def _lines_json(lines: Sequence[BudgetLine]) -> str:
    return compact_json(
        [
            [line.budget_id, line.scope_key, line.window_start, line.unit, line.cap, line.amount]
            for line in lines
        ]
    )


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
