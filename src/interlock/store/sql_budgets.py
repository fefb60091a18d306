"""Budgets in SQL: all-or-nothing reservations by one conditional upsert per budget,
committed from actual usage or released exactly once, the reaper that charges what a
crashed caller left reserved, and the closures an overrun leaves until an admin
reopens them. The arithmetic is :mod:`interlock.store.settle`'s."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import replace
from functools import cached_property
from os import register_at_fork, urandom
from typing import Any, Final, Protocol

from interlock.errors import ReservationClosed, ReservationNotFound, StoreError
from interlock.ledger.leases import LeaseBook
from interlock.store.chain import encode_body
from interlock.store.records import (
    ANY_AGENT,
    BudgetClosure,
    BudgetLine,
    BudgetRow,
    ChainHead,
    ReapResult,
    Refusal,
    Reservation,
    ReservationStatus,
    ReserveOutcome,
    Settler,
)
from interlock.store.settle import (
    CEILING,
    MAX_UNITS,
    Settlement,
    check_owner,
    committed,
    expired,
    released,
    units,
)
from interlock.store.sql_audit import AuditStore
from interlock.store.sql_base import AuditEntry, Cursor, compact_json
from interlock.store.sql_leases import LeaseStore, lines_json, quoted

__all__ = ["BudgetStore", "JoinedRecord"]

log = logging.getLogger("interlock.store")

_RESERVATION_COLUMNS = (
    "id, tenant, idempotency_key, status, lines, created_us, expires_us, settled_us, actual, "
    "owner, lease_id"
)
_CLOSURE_COLUMNS = "tenant, budget_id, scope_key, closed_us, reservation_id, excess"
_REAP_BATCH = 500
# A forced (human-approved) reservation skips the cap, not this: what is held in
# flight stays far enough from 2**63 that no sum of the columns can overflow.
_FORCED_LIMIT = 2**60
#: How PostgreSQL's interlock_reserve says which line its budget refused.
_REFUSED = re.compile(r"interlock-refused (\d+)")
#: A reservation on a counter that exists and is open, in one UPDATE (SQLite's path;
#: cheaper than the upsert below, which decides when this changes no row). The cap and
#: unit are the policy's latest, as the upsert sets them.
_TAKE_SET = (
    "UPDATE budgets SET reserved = reserved + ?, headroom = headroom + ?, cap = ?, unit = ?, "
    "updated_us = ? WHERE tenant = ? AND budget_id = ? AND scope_key = ? AND window_start = ? "
)
_OPEN = (
    " AND NOT EXISTS (SELECT 1 FROM budget_closures c WHERE c.tenant = ? AND c.budget_id = ? "
    "AND c.scope_key = ?)"
)
_TAKE: Final = _TAKE_SET + "AND spent + reserved + headroom + ? <= ?" + _OPEN
_FORCED_TAKE: Final = _TAKE_SET + f"AND reserved + headroom <= {_FORCED_LIMIT}" + _OPEN
#: The usual reservation and the usual commit, one statement each (schema 9's views:
#: SQLite's stored procedures; each aborts, changing nothing, on anything unusual).
_RESERVE_USUAL: Final = (
    "INSERT INTO budget_reserve_usual (id, tenant, idempotency_key, lines, created_us, "
    "expires_us, budget_id, scope_key, window_start, unit, cap, amount, headroom, owner) "
    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)
#: The same with no owner: its column left out, so NULL (sqlite3 binds a ``None``
#: only after looking for an adapter for it, as dear as binding a dozen values).
_RESERVE_USUAL_UNOWNED: Final = (
    "INSERT INTO budget_reserve_usual (id, tenant, idempotency_key, lines, created_us, "
    "expires_us, budget_id, scope_key, window_start, unit, cap, amount, headroom) "
    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"
)
_COMMIT_USUAL: Final = "INSERT INTO budget_commit_usual VALUES (?,?,?,?,?,?,?,?,?,?,?)"
#: The statuses the usual pair writes, looked up once: on Python 3.11 every attribute
#: read off an enum class takes the slow path ``EnumType.__getattr__`` installs.
_RESERVED: Final = ReservationStatus.RESERVED
_COMMITTED: Final = ReservationStatus.COMMITTED
#: Reservations an instance remembers having made, for commits that need no read.
_UNSETTLED_KEPT: Final = 4_096


class JoinedRecord(Protocol):
    """Audit records that join a reservation's transaction (see
    :meth:`BudgetStore.reserve`): ``entries`` encodes them (the decision's record, and
    the start record of the body it lets run, if one follows), before the transaction;
    ``claim`` is called inside it once the reservation is written, just before the
    record is appended (it may refuse: the transaction then rolls back);
    ``committed`` once the transaction has committed. ``durable``: its commit must
    reach the disk (durability ``power``)."""

    durable: bool

    def entries(self, reservation: Reservation) -> list[AuditEntry]: ...

    def claim(self) -> None: ...

    def committed(self) -> None: ...


class BudgetStore(LeaseStore, AuditStore):
    """Reservations against the policy's budgets, settling them, reaping them, and
    the closures overruns leave. On PostgreSQL a reservation and a commit are each
    one statement (the functions of migration 8): one round trip."""

    def reserve(
        self,
        *,
        tenant: str,
        idempotency_key: str,
        lines: Sequence[BudgetLine],
        ttl_us: int,
        force: bool = False,
        owner: str | None = None,
        record: JoinedRecord | None = None,
    ) -> ReserveOutcome:
        """Reserve every line (its amount and its headroom) at once, or none. A line
        whose budget cannot hold it, or whose budget is closed, refuses the whole
        reservation (``force`` records it past the cap anyway — an approved
        overspend — but never on a closed budget). The same ``idempotency_key``
        returns the first reservation again (``replayed``) and reserves nothing more.
        ``owner`` is the agent making it: only it (or an admin) may settle it.

        ``record``: the audit record of the decision this reservation belongs to,
        appended in the reservation's own transaction where the back end can
        (SQLite, a reservation not served from a lease): one commit for both. It is
        claimed and told it committed only when the reservation is made and new (a
        refusal or a replay claims nothing: the caller then records as usual)."""
        if len(lines) == 1:  # the usual reservation, checked without calls
            line = lines[0]
            ordered: tuple[BudgetLine, ...] = lines if isinstance(lines, tuple) else (line,)
            amount, headroom, cap = line.amount, line.headroom, line.cap
            if not (
                type(amount) is int
                and type(headroom) is int
                and type(cap) is int
                and 1 <= amount <= MAX_UNITS
                and 0 <= headroom <= MAX_UNITS
                and 0 <= cap <= MAX_UNITS
            ):
                _check_line(line)
            if not force and amount + headroom > cap:
                return self._never_fits(tenant, idempotency_key, line)
            if record is None and not force and self.usual_statements and self.leases is None:
                # SQLite's usual reservation, its statement's values from what is at hand
                now = self.clock()
                try:
                    reservation_id = _ids.pop()  # _new_id(), its usual case inlined
                except IndexError:
                    reservation_id = _new_id()
                expires = now + ttl_us
                reservation = _made(
                    reservation_id,
                    tenant,
                    idempotency_key,
                    _RESERVED,
                    ordered,
                    now,
                    expires,
                    None,
                    None,
                    owner,
                )
                params = (
                    reservation_id,
                    tenant,
                    idempotency_key,
                    lines_json(ordered),
                    now,
                    expires,
                    line.budget_id,
                    line.scope_key,
                    line.window_start,
                    line.unit,
                    cap,
                    amount,
                    headroom,
                )  # as _usual_reserve_params(reservation) gives them, but the owner
                if (
                    self.usual(_RESERVE_USUAL_UNOWNED, params)
                    if owner is None
                    else self.usual(_RESERVE_USUAL, (*params, owner))
                ):
                    self._unsettled.keep(reservation)  # a commit of it needs no read
                    return _outcome(reservation)
                try:
                    return self._reserve(reservation, force, None, usual_tried=True)
                except _Refused as refused:  # raised inside the transaction: it rolled back
                    return ReserveOutcome(None, refused.refusal)
        else:
            for line in lines:
                _check_line(line)
            # one lock order: no deadlock
            ordered = tuple(sorted(lines, key=lambda line: line.key))
            if not force:
                for line in ordered:
                    if line.held > line.cap:
                        return self._never_fits(tenant, idempotency_key, line)
        now = self.clock()
        reservation = _made(
            _new_id(),
            tenant,
            idempotency_key,
            _RESERVED,
            ordered,
            now,
            now + ttl_us,
            None,
            None,
            owner,
        )
        book = self.leases
        if (
            book is not None
            and not force
            and len(ordered) == 1
            and book.slice_for(ordered[0]) is not None
        ):
            leased = self._reserve_leased(book, reservation)
            if leased is not None:
                return leased
        try:
            if self.dialect == "postgres":
                return self._reserve_in_one(reservation, force)
            if record is None and not force and len(ordered) == 1 and self.usual_statements:
                if self.usual(_RESERVE_USUAL, _usual_reserve_params(reservation)):
                    self._unsettled.keep(reservation)  # a commit of it needs no read
                    return _outcome(reservation)
                return self._reserve(reservation, force, None, usual_tried=True)
            return self._reserve(reservation, force, record, usual_tried=False)
        except _Refused as refused:  # raised inside the transaction: it rolled back
            return ReserveOutcome(None, refused.refusal)

    def _never_fits(self, tenant: str, idempotency_key: str, line: BudgetLine) -> ReserveOutcome:
        """A line whose amount and headroom exceed its cap: refused without a write —
        unless the key was used before, when that reservation is replayed, as any
        retry is (its cap may have been lowered since: a retry must not be refused
        while its first reservation stays held)."""
        with self.transaction(write=False) as cur:
            row = self._keyed(cur, tenant, idempotency_key)
        if row is not None:
            return ReserveOutcome(_reservation(row, replayed=True))
        return ReserveOutcome(None, Refusal(line, spent=0, reserved=0))

    def _keyed(self, cur: Cursor, tenant: str, idempotency_key: str) -> Any:
        """The row of the tenant's reservation made with ``idempotency_key``, or None."""
        cur.execute(
            self.q(
                f"SELECT {_RESERVATION_COLUMNS} FROM reservations "
                "WHERE tenant = ? AND idempotency_key = ?"
            ),
            (tenant, idempotency_key),
        )
        return cur.fetchone()

    def _reserve_leased(self, book: LeaseBook, reservation: Reservation) -> ReserveOutcome | None:
        """Serve a one-line reservation from this instance's lease on its counter
        (granted or topped up first if need be). ``None``: the general path decides
        (no lease to be had, the key was used before, the budget is closed)."""
        line = reservation.lines[0]
        tenant, now = reservation.tenant, reservation.created_us
        lease = book.take(tenant, line, now)
        if lease is None:
            with book.growing:
                lease = book.take(tenant, line, now)
                if lease is None:
                    current = book.get((tenant, *line.key))
                    if current is None:
                        if self._lease_grant(book, tenant, line, now) is not None:
                            lease = book.take(tenant, line, now)
                    elif self._lease_top_up(book, current, line, now) is not None:
                        lease = book.take(tenant, line, now)  # renewed, perhaps grown
                        if lease is None and book.get(current.key) is current:
                            # the lease is short and the counter is full: hand back what
                            # it has free, for the general path (and other replicas)
                            with book.closing(current):
                                self._lease_close(current.id, now, expired_only=False)
            if lease is None:
                return None
        try:
            written = self._lease_insert(reservation, lease, line)
        except BaseException:
            book.unknown(lease)  # perhaps written: its units stay taken
            raise
        if not written:
            book.untake(lease, line.held)
            return None
        book.written(lease, reservation)
        return _outcome(reservation)

    def _reserve_in_one(self, reservation: Reservation, force: bool) -> ReserveOutcome:
        """PostgreSQL: the whole reservation in one statement (``interlock_reserve``)."""
        try:
            with self.single_statement() as cur:
                cur.execute(
                    "SELECT interlock_reserve(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    (
                        reservation.id,
                        reservation.tenant,
                        reservation.idempotency_key,
                        lines_json(reservation.lines),
                        reservation.created_us,
                        reservation.expires_us,
                        reservation.owner,
                        force,
                        _FORCED_LIMIT,
                    ),
                )
                fresh = bool(cur.fetchone()[0])
        except StoreError as exc:
            refused = _REFUSED.search(str(exc.__cause__ or ""))
            if refused is None:
                raise
            line = reservation.lines[int(refused.group(1)) - 1]
            with self.transaction(write=False) as cur:
                return ReserveOutcome(None, self._refusal(cur, reservation.tenant, line))
        if fresh:
            return _outcome(reservation)
        with self.transaction(write=False) as cur:
            row = self._keyed(cur, reservation.tenant, reservation.idempotency_key)
            return ReserveOutcome(_reservation(row, replayed=True))

    def _reserve(
        self,
        reservation: Reservation,
        force: bool,
        record: JoinedRecord | None,
        *,
        usual_tried: bool,
    ) -> ReserveOutcome:
        """One transaction: the usual statement where it applies (unless it was just
        tried on its own), else the reservation's row and each line's take; then,
        with ``record``, the decision's audit record (one commit for both)."""
        heads = None
        entries = None
        if record is None:
            begun = self.transaction(write=True)
        else:  # encoded first: the write lock is not held for it
            entries = record.entries(reservation)
            begun = self.audit_transaction(record.durable)
        with begun as cur:
            usual = (
                self.usual_statements
                and not usual_tried
                and not force
                and len(reservation.lines) == 1
                and self.usual_in(cur, _RESERVE_USUAL, _usual_reserve_params(reservation))
            )
            if not usual:
                replayed = self._reserve_rows(cur, reservation, force)
                if replayed is not None:
                    return replayed
            if record is not None and entries is not None:
                record.claim()
                heads = self._append_chain(cur, entries)[1]
        if record is not None and heads is not None:
            record.committed()
            self._appended(heads)
        self._unsettled.keep(reservation)  # committed: a commit of it needs no read
        return _outcome(reservation)

    def _reserve_rows(
        self, cur: Cursor, reservation: Reservation, force: bool
    ) -> ReserveOutcome | None:
        """The general reservation, inside a transaction: its row, then each line's
        take. A replay comes back (the key was used before); a refusal raises
        :class:`_Refused` (the transaction rolls back)."""
        tenant = reservation.tenant
        cur.execute(  # no RETURNING: SQLite counts the row inserted (or not) anyway
            self.q(
                "INSERT INTO reservations (id, tenant, idempotency_key, status, lines, "
                "created_us, expires_us, owner) VALUES (?, ?, ?, 'reserved', ?, ?, ?, ?) "
                "ON CONFLICT (tenant, idempotency_key) DO NOTHING"
            ),
            (
                reservation.id,
                tenant,
                reservation.idempotency_key,
                lines_json(reservation.lines),
                reservation.created_us,
                reservation.expires_us,
                reservation.owner,
            ),
        )
        if cur.rowcount != 1:
            row = self._keyed(cur, tenant, reservation.idempotency_key)
            return ReserveOutcome(_reservation(row, replayed=True))
        for line in reservation.lines:
            if not self._take(cur, tenant, line, reservation.created_us, force):
                raise _Refused(self._refusal(cur, tenant, line))
        return None

    def _take(self, cur: Cursor, tenant: str, line: BudgetLine, now: int, force: bool) -> bool:
        """Reserve on one budget: the counter's conditional UPDATE (the usual case: it
        exists, is open and can hold the line); when that changes no row, the one
        conditional upsert that decides every case — nothing when the budget is closed
        (its SELECT yields no row), else a new counter, else the counter's update
        where it can hold the line. Both run under the transaction's write lock: what
        the UPDATE found, the upsert finds too."""
        key = (tenant, line.budget_id, line.scope_key)
        cur.execute(
            self.q(_FORCED_TAKE if force else _TAKE),
            (line.amount, line.headroom, line.cap, line.unit, now, *key, line.window_start)
            + (() if force else (line.held, line.cap))
            + key,
        )
        if cur.rowcount == 1:
            return True
        condition = (
            f"budgets.reserved + budgets.headroom <= {_FORCED_LIMIT}"
            if force
            else "budgets.spent + budgets.reserved + budgets.headroom "
            "+ excluded.reserved + excluded.headroom <= excluded.cap"
        )
        cur.execute(
            self.q(
                "INSERT INTO budgets (tenant, budget_id, scope_key, window_start, unit, cap, "
                "spent, reserved, headroom, overage, excess, updated_us) "
                "SELECT ?, ?, ?, CAST(? AS BIGINT), ?, CAST(? AS BIGINT), 0, CAST(? AS BIGINT), "
                "CAST(? AS BIGINT), 0, 0, CAST(? AS BIGINT) WHERE NOT EXISTS (SELECT 1 FROM "
                "budget_closures WHERE tenant = ? AND budget_id = ? AND scope_key = ?) "
                "ON CONFLICT (tenant, budget_id, scope_key, window_start) DO UPDATE SET "
                "reserved = budgets.reserved + excluded.reserved, "
                "headroom = budgets.headroom + excluded.headroom, cap = excluded.cap, "
                f"unit = excluded.unit, updated_us = excluded.updated_us WHERE {condition} "
                "RETURNING 1"
            ),
            (
                tenant,
                line.budget_id,
                line.scope_key,
                line.window_start,
                line.unit,
                line.cap,
                line.amount,
                line.headroom,
                now,
                tenant,
                line.budget_id,
                line.scope_key,
            ),
        )
        return cur.fetchone() is not None

    def _refusal(self, cur: Cursor, tenant: str, line: BudgetLine) -> Refusal:
        cur.execute(
            self.q(
                "SELECT spent, reserved, headroom FROM budgets WHERE tenant = ? "
                "AND budget_id = ? AND scope_key = ? AND window_start = ?"
            ),
            (tenant, line.budget_id, line.scope_key, line.window_start),
        )
        row = cur.fetchone()
        spent, reserved, headroom = (int(row[0]), int(row[1]), int(row[2])) if row else (0, 0, 0)
        closed = self._closures(cur, tenant, line.budget_id, line.scope_key)
        return Refusal(
            line,
            spent=spent,
            reserved=reserved,
            headroom=headroom,
            closed=closed[0] if closed else None,
        )

    def commit(
        self,
        reservation_id: str,
        actual: Mapping[str, int] | None = None,
        *,
        by: Settler = ANY_AGENT,
        record: JoinedRecord | None = None,
    ) -> Reservation:
        """Spend a reservation. ``actual`` maps budget id → units really used, charged
        in full whatever was reserved: beyond the reservation it is overage, beyond
        the reservation and its headroom also excess, which closes the budget. A
        budget left out is charged what was reserved. Committing twice changes
        nothing; committing one the reaper expired (and charged) adds what ran past
        its reservation, all of it excess. ``by`` is the agent committing: another
        agent's reservation raises :class:`ReservationNotOwned`.

        ``record``: the settlement's audit record, given the settled reservation,
        appended in the commit's own transaction where the back end can (SQLite, a
        reservation this instance made, still in flight): one commit for both. It is
        told it committed only then; otherwise the caller records as usual."""
        checked = _usage(actual) if actual else {}
        now = self.clock()
        # The usual commit first: a reservation this instance made and remembers (only
        # SQLite's are; one served from a lease never is: the lease's path settles it).
        made = self._unsettled.pop(reservation_id)
        if made is not None:
            settled = self._commit_known(made, checked, by, now, record)
            if settled is not None:
                return settled
        book = self.leases
        if book is not None:
            settled = self._commit_leased(book, reservation_id, checked, by, now)
            if settled is not None:
                return settled
        if self.dialect == "postgres":
            settled = self._commit_in_one(reservation_id, checked, by, now)
            if settled is not None:
                return settled
        with self.transaction(write=True) as cur:
            reservation = self._read_leased(cur, reservation_id, now)
            check_owner(reservation, by)
            status = reservation.status
            if status is ReservationStatus.COMMITTED:
                return _replayed(reservation)
            if status is ReservationStatus.RELEASED:
                raise ReservationClosed(
                    f"reservation {reservation_id} was released; it cannot be committed",
                    reservation_id=reservation_id,
                )
            used, settlements = _charges(
                reservation.lines, checked, in_flight=status is ReservationStatus.RESERVED
            )
            cur.execute(
                self.q(
                    "UPDATE reservations SET status = 'committed', settled_us = ?, actual = ? "
                    "WHERE id = ?"
                ),
                (now, compact_json(used), reservation_id),
            )
            # The budget rows last: a hot budget stays locked for the least time.
            self._settle(cur, reservation.tenant, settlements, now)
            for line, settlement in settlements:
                if settlement.excess:
                    self._close(cur, reservation, line, settlement.excess, now)
        # The row is locked and read above: what it now holds is known.
        return _settled(reservation, ReservationStatus.COMMITTED, now, used)

    def _commit_known(
        self,
        reservation: Reservation,
        checked: Mapping[str, int],
        by: Settler,
        now: int,
        record: JoinedRecord | None = None,
    ) -> Reservation | None:
        """Commit a reservation this instance made, without reading it back: its
        lines, tenant and owner never change, and the status UPDATE's condition (still
        in flight, not on a lease) is the only thing the read decided. ``None`` when
        it is no longer in flight (settled elsewhere, or expired by the reaper): the
        transaction rolled back and the general path decides. One line closing
        nothing (the usual commit) is one statement (schema 9)."""
        if by is not ANY_AGENT:
            check_owner(reservation, by)
        lines = reservation.lines
        if len(lines) == 1 and self.usual_statements:
            line = lines[0]
            budget_id, amount, headroom = line.budget_id, line.amount, line.headroom
            used = checked.get(budget_id, amount) if checked else amount
            # settle.committed(line, used, in_flight=True), written out: within its
            # headroom (no excess, nothing closes) the usual statement settles it
            if used <= amount + headroom:
                params = (
                    reservation.id,
                    now,
                    f"{{{quoted(budget_id)}:{used}}}",  # compact_json({budget_id: used})
                    reservation.tenant,
                    budget_id,
                    line.scope_key,
                    line.window_start,
                    amount,  # off reserved
                    headroom,  # off headroom
                    used,  # charged
                    used - amount if used > amount else 0,  # overage
                )
                settled = _made(  # _settled(reservation, COMMITTED, now, actual), inlined
                    reservation.id,
                    reservation.tenant,
                    reservation.idempotency_key,
                    _COMMITTED,
                    lines,
                    reservation.created_us,
                    reservation.expires_us,
                    now,
                    {budget_id: used},
                    reservation.owner,
                )
                if record is None:
                    if not self.usual(_COMMIT_USUAL, params):
                        return None  # no longer in flight: the general path decides
                    return settled
                entries = record.entries(settled)  # encoded first: the lock is not held for it
                try:
                    with self.audit_transaction(record.durable) as cur:
                        if not self.usual_in(cur, _COMMIT_USUAL, params):
                            raise _NotInFlight
                        record.claim()
                        heads = self._append_chain(cur, entries)[1]
                except _NotInFlight:  # raised inside the transaction: it rolled back
                    return None
                record.committed()
                self._appended(heads)
                return settled
        used_by, settlements = _charges(lines, checked, in_flight=True)
        settled = _settled(reservation, ReservationStatus.COMMITTED, now, used_by)
        joining = None if record is None else record.entries(settled)
        joined: dict[str, ChainHead] | None = None
        try:
            with (
                self.transaction(write=True)
                if record is None
                else self.audit_transaction(record.durable)
            ) as cur:
                cur.execute(
                    self.q(
                        "UPDATE reservations SET status = 'committed', settled_us = ?, "
                        "actual = ? WHERE id = ? AND status = 'reserved' AND lease_id IS NULL"
                    ),
                    (now, _actual_json(used_by), reservation.id),
                )
                if cur.rowcount != 1:
                    raise _NotInFlight
                self._settle(cur, reservation.tenant, settlements, now)
                for line, settlement in settlements:
                    if settlement.excess:
                        self._close(cur, reservation, line, settlement.excess, now)
                if record is not None and joining is not None:
                    record.claim()
                    joined = self._append_chain(cur, joining)[1]
        except _NotInFlight:  # raised inside the transaction: it rolled back
            return None
        if record is not None and joined is not None:
            record.committed()
            self._appended(joined)
        return settled

    @cached_property
    def _unsettled(self) -> _Unsettled:
        return _Unsettled(_UNSETTLED_KEPT)

    def _commit_leased(
        self,
        book: LeaseBook,
        reservation_id: str,
        checked: Mapping[str, int],
        by: Settler,
        now: int,
    ) -> Reservation | None:
        """A commit of a reservation this instance served from a lease: one statement
        on its own row. ``None``: the general path decides."""
        served = book.served(reservation_id)
        if served is None:
            return None
        lease, reservation = served
        check_owner(reservation, by)
        line = reservation.lines[0]
        used = checked.get(line.budget_id, line.amount)
        if used <= line.held and self._lease_settle(reservation, lease, used, now):
            book.settled(reservation_id, line.held - used)
            return _settled(reservation, ReservationStatus.COMMITTED, now, {line.budget_id: used})
        book.forget(reservation_id)  # past its headroom, or settled elsewhere
        return None

    def _commit_in_one(
        self, reservation_id: str, checked: Mapping[str, int], by: Settler, now: int
    ) -> Reservation | None:
        """PostgreSQL: the usual commit in one statement (``interlock_commit``);
        ``None`` when it is not the usual case (the general path decides)."""
        with self.single_statement() as cur:
            cur.execute(
                "SELECT out_tenant, out_key, out_lines, out_created, out_expires, out_owner, "
                "out_actual FROM interlock_commit(%s, %s, %s, %s, %s, %s)",
                (
                    reservation_id,
                    compact_json(dict(checked)) if checked else None,
                    now,
                    None if by is ANY_AGENT else by,
                    by is ANY_AGENT,
                    CEILING,
                ),
            )
            row = cur.fetchone()
        if row is None:
            return None
        return Reservation(
            id=reservation_id,
            tenant=str(row[0]),
            idempotency_key=str(row[1]),
            status=ReservationStatus.COMMITTED,
            lines=tuple(_line(fields) for fields in json.loads(row[2])),
            created_us=int(row[3]),
            expires_us=int(row[4]),
            settled_us=now,
            actual={k: int(v) for k, v in json.loads(row[6]).items()},
            owner=None if row[5] is None else str(row[5]),
        )

    def _read_leased(self, cur: Cursor, reservation_id: str, now: int) -> Reservation:
        """The reservation, locked; one still in flight on a lease is first turned
        into an ordinary one (the lease row locked before the reservation's)."""
        if self.for_update:  # row locks: the lease's first, as everywhere
            lease_id = self._lease_of(cur, reservation_id)
            if lease_id is not None:
                self._lock_lease(cur, lease_id)
        cur.execute(
            self.q(
                f"SELECT {_RESERVATION_COLUMNS} FROM reservations WHERE id = ?{self.for_update}"
            ),
            (reservation_id,),
        )
        row = cur.fetchone()
        if row is None:
            raise ReservationNotFound(
                f"no reservation {reservation_id!r}", reservation_id=reservation_id
            )
        reservation = _reservation(row)
        if row[10] is not None and reservation.status is ReservationStatus.RESERVED:
            self._detach(cur, reservation, str(row[10]), now)
        return reservation

    def release(self, reservation_id: str, *, by: Settler = ANY_AGENT) -> Reservation:
        """Return a reservation's amounts to its budgets: the call did not run.
        Releasing twice (or one the reaper expired) changes nothing; a committed one
        cannot be released. ``by`` is the agent releasing (see :meth:`commit`)."""
        now = self.clock()
        self._unsettled.pop(reservation_id)  # no longer worth remembering
        book = self.leases
        served = None if book is None else book.served(reservation_id)
        if book is not None and served is not None:
            lease, reservation = served
            check_owner(reservation, by)
            if self._lease_settle(reservation, lease, None, now):
                book.settled(reservation_id, reservation.lines[0].held)
                return _settled(reservation, ReservationStatus.RELEASED, now, None)
            book.forget(reservation_id)
        with self.transaction(write=True) as cur:
            reservation = self._read_leased(cur, reservation_id, now)
            check_owner(reservation, by)
            if reservation.status in (ReservationStatus.RELEASED, ReservationStatus.EXPIRED):
                return _replayed(reservation)
            if reservation.status is ReservationStatus.COMMITTED:
                raise ReservationClosed(
                    f"reservation {reservation_id} was committed; it cannot be released",
                    reservation_id=reservation_id,
                )
            return self._give_back_all(cur, [reservation], ReservationStatus.RELEASED, now)[0]

    def _settle(
        self,
        cur: Cursor,
        tenant: str,
        settlements: Sequence[tuple[BudgetLine, Settlement]],
        now: int,
    ) -> None:
        """Apply settlements to their counters, each counter once, in the sorted order
        ``reserve`` locks them in (no deadlock); the totals saturate at CEILING."""
        if len(settlements) == 1:  # the usual settlement: one line, no executemany round
            line, s = settlements[0]
            values = (s.reserved, s.headroom, s.charge, s.overage, s.excess, now, tenant)
            cur.execute(self._settle_sql, values + line.key)
            return
        owed: dict[tuple[str, str, int], list[int]] = {}
        for line, s in settlements:
            total = owed.setdefault(line.key, [0, 0, 0, 0, 0])
            for index, value in enumerate((s.reserved, s.headroom, s.charge, s.overage, s.excess)):
                total[index] += value
        statement = self._settle_sql
        rows = [(*owed[key], now, tenant, *key) for key in sorted(owed)]
        if len(rows) == 1:  # the usual settlement: one budget, no executemany round
            cur.execute(statement, rows[0])
        else:
            cur.executemany(statement, rows)

    @cached_property
    def _settle_sql(self) -> str:
        least = self.least
        return self.q(
            "UPDATE budgets SET reserved = reserved - ?, headroom = headroom - ?, "
            f"spent = {least}(spent + ?, {CEILING}), "
            f"overage = {least}(overage + ?, {CEILING}), "
            f"excess = {least}(excess + ?, {CEILING}), updated_us = ? "
            "WHERE tenant = ? AND budget_id = ? AND scope_key = ? AND window_start = ?"
        )

    def _close(
        self, cur: Cursor, reservation: Reservation, line: BudgetLine, excess: int, now: int
    ) -> None:
        cur.execute(
            self.q(
                f"INSERT INTO budget_closures ({_CLOSURE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (tenant, budget_id, scope_key) DO UPDATE SET "
                f"excess = {self.least}(budget_closures.excess + excluded.excess, {CEILING})"
            ),
            (reservation.tenant, line.budget_id, line.scope_key, now, reservation.id, excess),
        )

    def _give_back_all(
        self,
        cur: Cursor,
        reservations: Sequence[Reservation],
        status: ReservationStatus,
        now: int,
    ) -> list[Reservation]:
        """Settle reservations nobody committed: released (nothing charged) or
        expired by the reaper (charged in full: the call may have run)."""
        settle = expired if status is ReservationStatus.EXPIRED else released
        charged: dict[str, dict[str, int] | None] = {}
        for reservation in reservations:
            charged[reservation.id] = (
                {line.budget_id: line.amount for line in reservation.lines}
                if status is ReservationStatus.EXPIRED
                else None
            )
        cur.executemany(
            self.q("UPDATE reservations SET status = ?, settled_us = ?, actual = ? WHERE id = ?"),
            [
                (
                    status.value,
                    now,
                    None if charged[r.id] is None else compact_json(charged[r.id]),
                    r.id,
                )
                for r in reservations
            ],
        )
        by_tenant: dict[str, list[tuple[BudgetLine, Settlement]]] = {}
        for reservation in reservations:
            by_tenant.setdefault(reservation.tenant, []).extend(
                (line, settle(line)) for line in reservation.lines
            )
        for tenant in sorted(by_tenant):  # the budget rows last, in lock order
            self._settle(cur, tenant, by_tenant[tenant], now)
        return [
            replace(r, status=status, settled_us=now, actual=charged[r.id]) for r in reservations
        ]

    def get_reservation(self, reservation_id: str) -> Reservation:
        with self.transaction(write=False) as cur:
            return self._read_reservation(cur, reservation_id, lock=False)

    def reservation_terms(self, reservation_id: str) -> Reservation:
        """The reservation as it was made — its lines, tenant and owner, which never
        change; its status may be stale. Served from memory for one this instance made
        and has not committed yet (pricing a commit needs no read), else read."""
        made = self._unsettled.peek(reservation_id)
        return made if made is not None else self.get_reservation(reservation_id)

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
        """Every budget counter (of ``tenant``, of ``budget_id``), with its closure."""
        where: list[str] = []
        params: list[Any] = []
        if tenant is not None:
            where.append("b.tenant = ?")
            params.append(tenant)
        if budget_id is not None:
            where.append("b.budget_id = ?")
            params.append(budget_id)
        sql = (
            "SELECT b.tenant, b.budget_id, b.scope_key, b.window_start, b.unit, b.cap, b.spent, "
            "b.reserved, b.overage, b.updated_us, b.headroom, b.excess, c.closed_us "
            "FROM budgets b LEFT JOIN budget_closures c ON c.tenant = b.tenant "
            "AND c.budget_id = b.budget_id AND c.scope_key = b.scope_key"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY b.tenant, b.budget_id, b.scope_key, b.window_start"
        with self.transaction(write=False) as cur:
            cur.execute(self.q(sql), params)
            return [_budget_row(r) for r in cur.fetchall()]

    def budget_closures(
        self, *, tenant: str | None = None, budget_id: str | None = None
    ) -> list[BudgetClosure]:
        """The closed budget counters (of ``tenant``, of ``budget_id``)."""
        with self.transaction(write=False) as cur:
            return self._closures(cur, tenant, budget_id, None)

    def _closures(
        self, cur: Cursor, tenant: str | None, budget_id: str | None, scope_key: str | None
    ) -> list[BudgetClosure]:
        where, params = _filters(tenant=tenant, budget_id=budget_id, scope_key=scope_key)
        cur.execute(
            self.q(
                f"SELECT {_CLOSURE_COLUMNS} FROM budget_closures{where} "
                "ORDER BY tenant, budget_id, scope_key"
            ),
            params,
        )
        return [_closure(row) for row in cur.fetchall()]

    def reopen_budget(
        self, *, tenant: str, budget_id: str, scope_key: str | None = None
    ) -> list[BudgetClosure]:
        """Lift the closures of ``budget_id`` in ``tenant`` (of one ``scope_key``, or
        all of them) and return what was lifted (empty: nothing was closed). The
        counters keep what they spent: a budget spent past its cap still refuses until
        its window restarts. An admin's act — record it in the audit log."""
        where, params = _filters(tenant=tenant, budget_id=budget_id, scope_key=scope_key)
        with self.transaction(write=True) as cur:
            cur.execute(
                self.q(f"DELETE FROM budget_closures{where} RETURNING {_CLOSURE_COLUMNS}"),
                params,
            )
            lifted = [_closure(row) for row in cur.fetchall()]
        return sorted(lifted, key=lambda c: (c.budget_id, c.scope_key))

    def reap(self, *, now: int | None = None, audited: bool = False) -> ReapResult:
        """Expire reservations past their TTL — charged in full: nobody said the call
        did not run — and expire lapsed approvals. ``audited``: each expired
        reservation's ``budget`` record (status ``expired``, what was charged) is
        appended to its tenant's audit chain in the same transaction."""
        now = self.clock() if now is None else now
        self._return_leases(now)
        self._reap_leases(now)
        reaped = 0
        while True:
            with self.transaction(write=True) as cur:
                cur.execute(
                    self.q(
                        f"SELECT {_RESERVATION_COLUMNS} FROM reservations "
                        "WHERE status = 'reserved' AND lease_id IS NULL "
                        f"AND expires_us <= ? ORDER BY expires_us LIMIT {_REAP_BATCH}"
                        f"{self.skip_locked}"
                    ),
                    (now,),
                )
                batch = [_reservation(row) for row in cur.fetchall()]
                heads: Mapping[str, ChainHead] = {}
                if batch:
                    settled = self._give_back_all(cur, batch, ReservationStatus.EXPIRED, now)
                    if audited:
                        heads = self._append_chain(cur, [_reaped(r, now) for r in settled])[1]
            if heads:
                self._appended(heads)
            reaped += len(batch)
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
            expired_approvals = max(cur.rowcount, 0)
        return ReapResult(reservations=reaped, approvals=expired_approvals)

    def close(self) -> None:
        """Return this instance's leases (what they hold free goes back to the
        counters), then close."""
        if self.leases is not None and not self._closed:
            try:
                self._return_leases(self.clock(), everything=True)
            except StoreError as exc:  # the reaper closes them once they expire
                log.warning("interlock: could not return budget leases: %s", exc)
        super().close()


def _reaped(reservation: Reservation, now: int) -> AuditEntry:
    """The audit record of a reservation the reaper charged (kind ``budget``, as the
    guard's settlement records, with ``by: reaper``)."""
    body = encode_body(
        {
            "kind": "budget",
            "reservation_id": reservation.id,
            "status": reservation.status.value,
            "owner": reservation.owner,
            "reserved": {line.budget_id: line.amount for line in reservation.lines},
            "actual": reservation.actual,
            "by": "reaper",
        }
    )
    return (reservation.tenant, now, "budget", None, reservation.owner, None, body)


class _Refused(Exception):
    """Rolls a reservation's transaction back and carries the refusal out."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__("refused")
        self.refusal = refusal


class _NotInFlight(Exception):
    """Rolls a commit's transaction back: the reservation was settled meanwhile."""


class _Unsettled:
    """The reservations an instance made and has not committed yet, the newest
    ``kept`` of them (an older one is committed by the general path, which reads it).
    Only what never changes is used from here; the database decides the status."""

    def __init__(self, kept: int) -> None:
        self._kept = kept
        self._by_id: dict[str, Reservation] = {}

    def keep(self, reservation: Reservation) -> None:
        # No lock: each dict operation is atomic (one C call under the GIL), and two
        # threads evicting at once at worst evict one entry more (its commit reads).
        by_id = self._by_id
        by_id[reservation.id] = reservation
        if len(by_id) > self._kept:
            # another thread evicting at once may make this raise: nothing to do then
            with suppress(KeyError, RuntimeError, StopIteration):
                del by_id[next(iter(by_id))]  # the oldest: dicts keep insertion order

    def pop(self, reservation_id: str) -> Reservation | None:
        return self._by_id.pop(reservation_id, None)  # atomic: one taker only

    def peek(self, reservation_id: str) -> Reservation | None:
        return self._by_id.get(reservation_id)  # one dict read: atomic under the GIL


def _settled(
    reservation: Reservation,
    status: ReservationStatus,
    now: int,
    actual: dict[str, int] | None,
) -> Reservation:
    """``reservation`` settled (built directly: ``dataclasses.replace`` is slow)."""
    r = reservation
    return _made(
        r.id,
        r.tenant,
        r.idempotency_key,
        status,
        r.lines,
        r.created_us,
        r.expires_us,
        now,
        actual,
        r.owner,
    )


class _Unfrozen:
    """A :class:`Reservation`'s slots, writable: :func:`_made` fills them with plain
    attribute stores, then assigns the object its real class (the same slots, so the
    same layout: Python allows it) — frozen from then on, and equal to one the
    dataclass built (its ``__eq__`` wants the very class). A third of the cost of
    calling each slot's ``__set__`` (a generic call each), a sixth of the frozen
    dataclass's ``__init__`` (one ``object.__setattr__`` each); a budgeted call
    builds two. Tests compare the two and check the result stays frozen."""

    __slots__ = Reservation.__slots__


def _made(
    id: str,
    tenant: str,
    idempotency_key: str,
    status: ReservationStatus,
    lines: tuple[BudgetLine, ...],
    created_us: int,
    expires_us: int,
    settled_us: int | None,
    actual: dict[str, int] | None,
    owner: str | None,
) -> Reservation:
    """``Reservation(...)``, not replayed, built slot by slot."""
    r: Any = _Unfrozen()
    r.id = id
    r.tenant = tenant
    r.idempotency_key = idempotency_key
    r.status = status
    r.lines = lines
    r.created_us = created_us
    r.expires_us = expires_us
    r.settled_us = settled_us
    r.actual = actual
    r.replayed = False
    r.owner = owner
    r.__class__ = Reservation
    return r  # type: ignore[no-any-return]


#: How many reservation ids one read of the OS's random source makes.
_IDS_AT_ONCE: Final = 64
#: Ids made ahead (the random part of each is 12 bytes of ``os.urandom``, as
#: ``secrets.token_hex(12)`` made it); emptied in a forked child, which must not
#: hand out its parent's. ``list.pop`` is atomic: no two callers get the same one.
_ids: list[str] = []
register_at_fork(after_in_child=_ids.clear)


def _new_id() -> str:
    """A new reservation id: ``res_`` and 24 random hex digits. One ``urandom`` read
    makes :data:`_IDS_AT_ONCE` of them (a system call each was a reservation's
    dearest line of Python)."""
    try:
        return _ids.pop()
    except IndexError:
        raw = urandom(12 * _IDS_AT_ONCE).hex()
        _ids.extend(["res_" + raw[i : i + 24] for i in range(24, 24 * _IDS_AT_ONCE, 24)])
        return "res_" + raw[:24]


class _UnfrozenOutcome:
    """A :class:`ReserveOutcome`'s slots, writable (as :class:`_Unfrozen`)."""

    __slots__ = ReserveOutcome.__slots__


def _outcome(reservation: Reservation) -> ReserveOutcome:
    """``ReserveOutcome(reservation)``, built slot by slot (as :func:`_made`)."""
    outcome: Any = _UnfrozenOutcome()
    outcome.reservation = reservation
    outcome.refusal = None
    outcome.__class__ = ReserveOutcome
    return outcome  # type: ignore[no-any-return]


def _usage(actual: Mapping[str, int]) -> dict[str, int]:
    """``actual`` checked: units, each (the usual values pass without building a
    message; :func:`units` raises for the others)."""
    checked: dict[str, int] = {}
    for budget_id, value in actual.items():
        if type(value) is int and 0 <= value <= MAX_UNITS:
            checked[budget_id] = value
        else:
            checked[budget_id] = units(value, f"the usage on budget {budget_id!r}")
    return checked


def _charges(
    lines: tuple[BudgetLine, ...], checked: Mapping[str, int], *, in_flight: bool
) -> tuple[dict[str, int], list[tuple[BudgetLine, Settlement]]]:
    """What a commit charges each line (its usage in ``checked``, else its amount) and
    the settlement that follows. (Out of :meth:`BudgetStore.commit`: a comprehension
    there would make each call of it, the usual ones too, build closure cells.)"""
    used = {line.budget_id: checked.get(line.budget_id, line.amount) for line in lines}
    return used, [
        (line, committed(line, used[line.budget_id], in_flight=in_flight)) for line in lines
    ]


def _check_line(line: BudgetLine) -> None:
    """Raise :class:`AmountOutOfRange` unless the line's amounts are units (the
    usual case is tested first, without building the messages)."""
    amount, headroom, cap = line.amount, line.headroom, line.cap
    if (
        type(amount) is int
        and type(headroom) is int
        and type(cap) is int
        and 1 <= amount <= MAX_UNITS
        and 0 <= headroom <= MAX_UNITS
        and 0 <= cap <= MAX_UNITS
    ):
        return
    units(amount, f"the amount on budget {line.budget_id!r}", least=1)
    units(headroom, f"the headroom on budget {line.budget_id!r}")
    units(cap, f"the cap of budget {line.budget_id!r}")


def _usual_reserve_params(reservation: Reservation) -> tuple[Any, ...]:
    """The usual reservation's row and its one line, as ``budget_reserve_usual``
    takes them."""
    line = reservation.lines[0]
    return (
        reservation.id,
        reservation.tenant,
        reservation.idempotency_key,
        lines_json(reservation.lines),
        reservation.created_us,
        reservation.expires_us,
        line.budget_id,
        line.scope_key,
        line.window_start,
        line.unit,
        line.cap,
        line.amount,
        line.headroom,
        reservation.owner,
    )


def _actual_json(used: dict[str, int]) -> str:
    """``compact_json(used)``, written directly for the usual single budget."""
    if len(used) == 1:
        for budget_id, value in used.items():
            if type(value) is int:
                return f"{{{quoted(budget_id)}:{value}}}"
    return compact_json(used)


def _line(fields: list[Any]) -> BudgetLine:
    # Reservations made before schema 6 have six fields: no headroom.
    budget_id, scope_key, window, unit, cap, amount, *rest = fields
    headroom = int(rest[0]) if rest else 0
    return BudgetLine(
        str(budget_id), str(scope_key), int(window), str(unit), int(cap), int(amount), headroom
    )


def _filters(**columns: str | None) -> tuple[str, list[str]]:
    """`` WHERE a = ? AND b = ?`` for the columns given (not None), and their values."""
    named = [(column, value) for column, value in columns.items() if value is not None]
    if not named:
        return "", []
    return (
        " WHERE " + " AND ".join(f"{column} = ?" for column, _ in named),
        [value for _, value in named],
    )


def _budget_row(r: Any) -> BudgetRow:
    return BudgetRow(
        tenant=str(r[0]),
        budget_id=str(r[1]),
        scope_key=str(r[2]),
        window_start=int(r[3]),
        unit=str(r[4]),
        cap=int(r[5]),
        spent=int(r[6]),
        reserved=int(r[7]),
        overage=int(r[8]),
        updated_us=int(r[9]),
        headroom=int(r[10]),
        excess=int(r[11]),
        closed_us=None if r[12] is None else int(r[12]),
    )


def _closure(row: Any) -> BudgetClosure:
    return BudgetClosure(
        str(row[0]), str(row[1]), str(row[2]), int(row[3]), str(row[4]), int(row[5])
    )


def _reservation(row: Any, *, replayed: bool = False) -> Reservation:
    lines = tuple(_line(fields) for fields in json.loads(row[4]))
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
        owner=None if row[9] is None else str(row[9]),
    )


def _replayed(reservation: Reservation) -> Reservation:
    return replace(reservation, replayed=True)
