"""What a store instance knows of its budget leases, in memory. Pure bookkeeping.

A lease is a slice of one budget counter that the shared row counts as reserved and
this instance serves reservations from (``docs/adr/0012-budget-leases.md``). The
database is the truth; this book is a lower bound of each lease's free units, so it
never serves more than the lease holds: a reservation takes its ``held`` (amount +
headroom) off ``free`` before its row is written, and gives back only what this
instance saw settled. A settlement made elsewhere (another replica, the reaper) is
not seen here: the book then under-counts ``free`` until the lease is closed, which
costs capacity, never the cap.

Example::

    book = LeaseBook({"pool": 5_000}, ttl_us=30_000_000, max_age_us=120_000_000)
    lease = book.take("acme", line, now)      # None: no lease with room
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from interlock.errors import AmountOutOfRange
from interlock.store.records import BudgetLine, Reservation

__all__ = ["Lease", "LeaseBook", "LeaseKey"]

#: tenant, budget id, scope key, window start
LeaseKey = tuple[str, str, str, int]


@dataclass(slots=True)
class Lease:
    """One lease this instance holds: its id, counter, what it has free, and how
    many reservation rows are being written against it right now."""

    id: str
    key: LeaseKey
    free: int
    granted_us: int
    expires_us: int
    last_used_us: int
    pending: int = 0
    closing: bool = False


@dataclass(slots=True)
class _Served:
    lease: Lease
    reservation: Reservation


@dataclass
class LeaseBook:
    """The leases of one store instance. ``slices`` maps a budget id to the units a
    lease on it takes from the shared counter at a time; ``ttl_us`` is how long a
    lease outlives its holder's last renewal; ``idle_us`` after its last use a lease
    is returned; ``max_age_us`` after its grant it is returned even when busy (so a
    reservation nobody settles is handed to the reaper within that time)."""

    slices: Mapping[str, int]
    ttl_us: int = 30_000_000
    idle_us: int = 5_000_000
    max_age_us: int = 120_000_000
    owner: str = field(default_factory=lambda: "replica_" + secrets.token_hex(8))
    _leases: dict[LeaseKey, Lease] = field(default_factory=dict)
    _served: dict[str, _Served] = field(default_factory=dict)
    _lock: threading.Condition = field(default_factory=threading.Condition)
    #: Held while a lease is granted or topped up: one lease per counter at a time.
    growing: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        for budget_id, units in self.slices.items():
            if isinstance(units, bool) or not isinstance(units, int) or units < 1:
                raise AmountOutOfRange(
                    f"the lease slice of budget {budget_id!r} must be a positive number of "
                    f"units, not {units!r}"
                )
        if self.ttl_us <= 0 or self.idle_us <= 0 or self.max_age_us <= 0:
            raise AmountOutOfRange("lease ttl, idle and max age must be positive")

    def slice_for(self, line: BudgetLine) -> int | None:
        """The slice a lease on ``line``'s budget takes (at least what the line
        holds), or ``None`` when that budget is not leased."""
        units = self.slices.get(line.budget_id)
        return None if units is None else max(units, line.held)

    def take(self, tenant: str, line: BudgetLine, now: int) -> Lease | None:
        """Take ``line.held`` off the free units of the live lease on its counter;
        ``None`` when there is none or it has not that much left. A lease taken from
        is pending until :meth:`written` or :meth:`untake`."""
        key = (tenant, *line.key)
        with self._lock:
            lease = self._leases.get(key)
            if lease is None or lease.closing or lease.free < line.held:
                return None
            if now >= lease.expires_us - self.ttl_us // 2:
                return None  # due for renewal: the caller tops up, which renews
            lease.free -= line.held
            lease.pending += 1
            lease.last_used_us = now
            return lease

    def untake(self, lease: Lease, held: int) -> None:
        """The row was not written: the units are free again."""
        with self._lock:
            lease.free += held
            lease.pending -= 1
            self._lock.notify_all()

    def unknown(self, lease: Lease) -> None:
        """The write failed without saying whether the row was written (a cut
        connection may have lost the answer to a commit): the units stay taken —
        never serve what the database may already hold."""
        with self._lock:
            lease.pending -= 1
            self._lock.notify_all()

    def written(self, lease: Lease, reservation: Reservation) -> None:
        """The reservation's row is written: it is served from ``lease``."""
        with self._lock:
            lease.pending -= 1
            self._served[reservation.id] = _Served(lease, reservation)
            self._lock.notify_all()

    def served(self, reservation_id: str) -> tuple[Lease, Reservation] | None:
        with self._lock:
            served = self._served.get(reservation_id)
            return None if served is None else (served.lease, served.reservation)

    def settled(self, reservation_id: str, returned: int) -> None:
        """This instance settled the reservation: ``returned`` units (its held minus
        what was charged) are free again. Forgotten either way."""
        with self._lock:
            served = self._served.pop(reservation_id, None)
            if served is not None and not served.lease.closing:
                served.lease.free += returned

    def forget(self, reservation_id: str) -> None:
        """Settled elsewhere (or about to be, on the general path): the units it held
        stay taken here until the lease closes."""
        with self._lock:
            self._served.pop(reservation_id, None)

    def get(self, key: LeaseKey) -> Lease | None:
        with self._lock:
            return self._leases.get(key)

    def add(self, lease: Lease) -> None:
        with self._lock:
            self._leases[lease.key] = lease

    def grew(self, lease: Lease, units: int, now: int) -> None:
        """A top-up granted ``units`` more and renewed the lease."""
        with self._lock:
            lease.free += units
            lease.expires_us = now + self.ttl_us

    def renewed(self, lease: Lease, now: int) -> None:
        with self._lock:
            lease.expires_us = now + self.ttl_us

    @contextmanager
    def closing(self, lease: Lease) -> Iterator[None]:
        """Stop serving from ``lease`` and wait until no row is being written against
        it; the body closes it in the database."""
        with self._lock:
            lease.closing = True
            if self._leases.get(lease.key) is lease:
                del self._leases[lease.key]
            while lease.pending:
                self._lock.wait(1.0)
            for reservation_id in [r for r, s in self._served.items() if s.lease is lease]:
                del self._served[reservation_id]
        yield

    def due(self, now: int, *, everything: bool = False) -> list[Lease]:
        """The leases to return now: idle, too old, near expiry — or all of them."""
        with self._lock:
            return [
                lease
                for lease in self._leases.values()
                if everything
                or now - lease.last_used_us >= self.idle_us
                or now - lease.granted_us >= self.max_age_us
                or now >= lease.expires_us - self.ttl_us // 4
            ]
