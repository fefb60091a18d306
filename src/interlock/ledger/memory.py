"""Budgets and rate limits in this process's memory: what a guard without a store
enforces them with.

The semantics are the store's — reservations all-or-nothing with their headroom,
commits charged in full, excess recorded and closing the budget until reopened, only
the reserving agent settling, the reaper charging what nobody settled, GCRA rate
limits — and the arithmetic is the same (:mod:`interlock.store.settle`). What differs:
it is **one process only** (another process, or this one after a restart, starts from
zero), reservations past their TTL are expired whenever the next one is made (no
thread), and a settled reservation is remembered for ``keep_settled`` seconds (a
replay after that reserves again).

Example::

    from interlock import Action, Guard

    guard = Guard(policy)           # no store: budgets and rate limits live here
    decision = guard.check(Action.tool("paid_lookup", {"est_cost": 0.2}))
    guard.commit(decision)
"""

from __future__ import annotations

import heapq
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from interlock.errors import ReservationClosed, ReservationNotFound
from interlock.store.records import (
    ANY_AGENT,
    BudgetClosure,
    BudgetLine,
    BudgetRow,
    RateOutcome,
    ReapResult,
    Refusal,
    Reservation,
    ReservationStatus,
    ReserveOutcome,
    Settler,
    now_us,
)
from interlock.store.settle import (
    CEILING,
    Settlement,
    admits,
    check_owner,
    committed,
    expired,
    released,
    units,
)

__all__ = ["MemoryLedger"]

_FORCED_LIMIT = 2**60  # as the SQL store: what is held in flight stays far from overflow


@dataclass(slots=True)
class _Counter:
    unit: str
    cap: int
    updated_us: int
    spent: int = 0
    reserved: int = 0
    headroom: int = 0
    overage: int = 0
    excess: int = 0

    def apply(self, settlement: Settlement, now: int) -> None:
        self.reserved -= settlement.reserved
        self.headroom -= settlement.headroom
        self.spent = min(self.spent + settlement.charge, CEILING)
        self.overage = min(self.overage + settlement.overage, CEILING)
        self.excess = min(self.excess + settlement.excess, CEILING)
        self.updated_us = now


class MemoryLedger:
    """The budget and rate-limit half of a store, in memory. Thread-safe.
    ``clock`` returns microseconds since the epoch (tests pass a fake one)."""

    #: Operations never wait on I/O: an async check calls them inline.
    blocking = False

    def __init__(
        self, *, clock: Callable[[], int] | None = None, keep_settled: float = 3600.0
    ) -> None:
        self.clock: Callable[[], int] = clock or now_us
        self.keep_settled_us = round(keep_settled * 1_000_000)
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, str, str, int], _Counter] = {}
        self._closures: dict[tuple[str, str, str], BudgetClosure] = {}
        self._reservations: dict[str, Reservation] = {}
        self._by_key: dict[tuple[str, str], str] = {}
        self._expiries: list[tuple[int, str]] = []  # a heap of open reservations
        self._settled: list[tuple[int, str]] = []  # a heap of settled ones, to forget
        self._rates: dict[tuple[str, str, str], int] = {}

    # -- budgets -----------------------------------------------------------------------

    def reserve(
        self,
        *,
        tenant: str,
        idempotency_key: str,
        lines: Sequence[BudgetLine],
        ttl_us: int,
        force: bool = False,
        owner: str | None = None,
    ) -> ReserveOutcome:
        """As :meth:`interlock.store.SqlStore.reserve`."""
        for line in lines:
            units(line.amount, f"the amount on budget {line.budget_id!r}", least=1)
            units(line.headroom, f"the headroom on budget {line.budget_id!r}")
            units(line.cap, f"the cap of budget {line.budget_id!r}")
        ordered = tuple(sorted(lines, key=lambda line: line.key))
        now = self.clock()
        with self._lock:
            self._reap(now)
            known = self._by_key.get((tenant, idempotency_key))
            if known is not None:
                return ReserveOutcome(replace(self._reservations[known], replayed=True))
            for line in ordered:
                refusal = self._refusal(tenant, line, force)
                if refusal is not None:
                    return ReserveOutcome(None, refusal)
            for line in ordered:
                counter = self._counters.setdefault(
                    (tenant, *line.key), _Counter(line.unit, line.cap, now)
                )
                counter.unit, counter.cap, counter.updated_us = line.unit, line.cap, now
                counter.reserved += line.amount
                counter.headroom += line.headroom
            reservation = Reservation(
                id="res_" + secrets.token_hex(12),
                tenant=tenant,
                idempotency_key=idempotency_key,
                status=ReservationStatus.RESERVED,
                lines=ordered,
                created_us=now,
                expires_us=now + ttl_us,
                owner=owner,
            )
            self._reservations[reservation.id] = reservation
            self._by_key[(tenant, idempotency_key)] = reservation.id
            heapq.heappush(self._expiries, (reservation.expires_us, reservation.id))
            return ReserveOutcome(reservation)

    def _refusal(self, tenant: str, line: BudgetLine, force: bool) -> Refusal | None:
        counter = self._counters.get((tenant, *line.key))
        spent, reserved, headroom = (
            (counter.spent, counter.reserved, counter.headroom) if counter else (0, 0, 0)
        )
        closure = self._closures.get((tenant, line.budget_id, line.scope_key))
        if force:
            fits = reserved + headroom <= _FORCED_LIMIT
        else:
            fits = admits(spent, reserved, headroom, line)
        if closure is None and fits:
            return None
        return Refusal(line, spent=spent, reserved=reserved, headroom=headroom, closed=closure)

    def commit(
        self,
        reservation_id: str,
        actual: Mapping[str, int] | None = None,
        *,
        by: Settler = ANY_AGENT,
    ) -> Reservation:
        """As :meth:`interlock.store.SqlStore.commit`."""
        checked = {
            budget_id: units(used, f"the usage on budget {budget_id!r}")
            for budget_id, used in (actual or {}).items()
        }
        now = self.clock()
        with self._lock:
            reservation = self._owned(reservation_id, by)
            status = reservation.status
            if status is ReservationStatus.COMMITTED:
                return replace(reservation, replayed=True)
            if status is ReservationStatus.RELEASED:
                raise ReservationClosed(
                    f"reservation {reservation_id} was released; it cannot be committed",
                    reservation_id=reservation_id,
                )
            used = {
                line.budget_id: checked.get(line.budget_id, line.amount)
                for line in reservation.lines
            }
            in_flight = status is ReservationStatus.RESERVED
            for line in reservation.lines:
                settlement = committed(line, used[line.budget_id], in_flight=in_flight)
                self._apply(reservation.tenant, line, settlement, now)
                if settlement.excess:
                    self._close(reservation, line, settlement.excess, now)
            return self._settle(reservation, ReservationStatus.COMMITTED, used, now)

    def release(self, reservation_id: str, *, by: Settler = ANY_AGENT) -> Reservation:
        """As :meth:`interlock.store.SqlStore.release`."""
        now = self.clock()
        with self._lock:
            reservation = self._owned(reservation_id, by)
            if reservation.status in (ReservationStatus.RELEASED, ReservationStatus.EXPIRED):
                return replace(reservation, replayed=True)
            if reservation.status is ReservationStatus.COMMITTED:
                raise ReservationClosed(
                    f"reservation {reservation_id} was committed; it cannot be released",
                    reservation_id=reservation_id,
                )
            for line in reservation.lines:
                self._apply(reservation.tenant, line, released(line), now)
            return self._settle(reservation, ReservationStatus.RELEASED, None, now)

    def reservation_terms(self, reservation_id: str) -> Reservation:
        """The reservation as it was made (its lines and owner); here, as it is."""
        return self.get_reservation(reservation_id)

    def get_reservation(self, reservation_id: str) -> Reservation:
        with self._lock:
            return self._get(reservation_id)

    def budget_rows(
        self, *, tenant: str | None = None, budget_id: str | None = None
    ) -> list[BudgetRow]:
        """As :meth:`interlock.store.SqlStore.budget_rows`."""
        with self._lock:
            self._reap(self.clock())
            rows = []
            for (t, b, scope_key, window), c in sorted(self._counters.items()):
                if (tenant is not None and t != tenant) or (
                    budget_id is not None and b != budget_id
                ):
                    continue
                closure = self._closures.get((t, b, scope_key))
                rows.append(
                    BudgetRow(
                        tenant=t,
                        budget_id=b,
                        scope_key=scope_key,
                        window_start=window,
                        unit=c.unit,
                        cap=c.cap,
                        spent=c.spent,
                        reserved=c.reserved,
                        overage=c.overage,
                        updated_us=c.updated_us,
                        headroom=c.headroom,
                        excess=c.excess,
                        closed_us=None if closure is None else closure.closed_us,
                    )
                )
            return rows

    def budget_closures(
        self, *, tenant: str | None = None, budget_id: str | None = None
    ) -> list[BudgetClosure]:
        with self._lock:
            return [
                closure
                for key, closure in sorted(self._closures.items())
                if (tenant is None or key[0] == tenant)
                and (budget_id is None or key[1] == budget_id)
            ]

    def reopen_budget(
        self, *, tenant: str, budget_id: str, scope_key: str | None = None
    ) -> list[BudgetClosure]:
        """As :meth:`interlock.store.SqlStore.reopen_budget`."""
        with self._lock:
            keys = [
                key
                for key in sorted(self._closures)
                if key[:2] == (tenant, budget_id) and scope_key in (None, key[2])
            ]
            return [self._closures.pop(key) for key in keys]

    def reap(self, *, now: int | None = None) -> ReapResult:
        """Expire (and charge) reservations past their TTL now."""
        with self._lock:
            return ReapResult(reservations=self._reap(self.clock() if now is None else now))

    # -- rate limits -------------------------------------------------------------------

    def rate_acquire(
        self, *, tenant: str, limit_id: str, key: str, interval_us: int, window_us: int
    ) -> RateOutcome:
        """As :meth:`interlock.store.SqlStore.rate_acquire` (GCRA)."""
        now = self.clock()
        slot = (tenant, limit_id, key)
        with self._lock:
            tat = max(self._rates.get(slot, now), now)
            if tat + interval_us - now <= window_us:
                self._rates[slot] = tat + interval_us
                return RateOutcome(True)
        return RateOutcome(False, retry_after=max(0.0, (tat + interval_us - now - window_us) / 1e6))

    # -- internals (under the lock) ------------------------------------------------------

    def _get(self, reservation_id: str) -> Reservation:
        try:
            return self._reservations[reservation_id]
        except KeyError:
            raise ReservationNotFound(
                f"no reservation {reservation_id!r}", reservation_id=reservation_id
            ) from None

    def _owned(self, reservation_id: str, by: Settler) -> Reservation:
        reservation = self._get(reservation_id)
        check_owner(reservation, by)
        return reservation

    def _apply(self, tenant: str, line: BudgetLine, settlement: Settlement, now: int) -> None:
        counter = self._counters.get((tenant, *line.key))
        if counter is not None:
            counter.apply(settlement, now)

    def _close(self, reservation: Reservation, line: BudgetLine, excess: int, now: int) -> None:
        key = (reservation.tenant, line.budget_id, line.scope_key)
        known = self._closures.get(key)
        if known is None:
            self._closures[key] = BudgetClosure(*key, now, reservation.id, excess)
        else:
            self._closures[key] = replace(known, excess=min(known.excess + excess, CEILING))

    def _settle(
        self,
        reservation: Reservation,
        status: ReservationStatus,
        actual: dict[str, int] | None,
        now: int,
    ) -> Reservation:
        settled = replace(reservation, status=status, settled_us=now, actual=actual)
        self._reservations[reservation.id] = settled
        heapq.heappush(self._settled, (now + self.keep_settled_us, reservation.id))
        return settled

    def _reap(self, now: int) -> int:
        reaped = 0
        while self._expiries and self._expiries[0][0] <= now:
            _, reservation_id = heapq.heappop(self._expiries)
            reservation = self._reservations.get(reservation_id)
            if reservation is None or reservation.status is not ReservationStatus.RESERVED:
                continue
            for line in reservation.lines:
                self._apply(reservation.tenant, line, expired(line), now)
            charged = {line.budget_id: line.amount for line in reservation.lines}
            self._settle(reservation, ReservationStatus.EXPIRED, charged, now)
            reaped += 1
        while self._settled and self._settled[0][0] <= now:
            _, reservation_id = heapq.heappop(self._settled)
            forgotten = self._reservations.pop(reservation_id, None)
            if forgotten is not None:
                self._by_key.pop((forgotten.tenant, forgotten.idempotency_key), None)
        return reaped
