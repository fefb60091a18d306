"""The approval webhook's bookkeeping, in SQL both back ends run: which approvals are
due a notice, the lease a dispatcher takes on them, and what became of a delivery.

Opening an approval writes nothing more for it: the state lives in nullable columns
of ``approvals`` (migration 0003). An approval is **due** while it is pending and
unexpired, not yet notified, its ``notify_next_us`` (NULL: at once) has passed, and
no dispatcher holds a live lease on it.

Claiming is one statement that sets the lease::

    WITH due AS MATERIALIZED (SELECT id ... WHERE <due> ORDER BY created_us LIMIT n
                              FOR UPDATE SKIP LOCKED)
    UPDATE approvals SET notify_claimed_until_us = <now + lease>, ...
    WHERE id IN (SELECT id FROM due) AND <due> RETURNING ...

The SELECT skips rows another replica is claiming, so racing replicas take different
rows instead of queueing. It is a materialised CTE, evaluated once: as a plain
``IN (subquery)`` PostgreSQL may plan it as a re-scanned semi-join, and each re-scan
skips the rows this statement already locked and returns the next ones — claiming
past ``LIMIT``. The condition is repeated on the UPDATE because PostgreSQL, at READ
COMMITTED, re-checks only the updated row's own conditions after waiting for a row
lock: a row another replica claimed meanwhile fails them and is left alone, never
claimed twice. SQLite serialises writers.

A lease is fenced by its own value (``notify_claimed_until_us``): only the holder of
the current lease can release it or record a failure, so a dispatcher whose lease
lapsed cannot overwrite the replica that took over.

Example::

    claims = claim_due(store, limit=10, lease_us=30_000_000)
    for claim in claims:
        ...  # deliver claim.record
        mark_notified(store, claim.record.id)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from interlock.errors import ApprovalNotFound
from interlock.store.records import APPROVAL_COLUMNS, ApprovalRecord
from interlock.store.sql import SqlStore

__all__ = [
    "NotificationClaim",
    "NotificationState",
    "claim_due",
    "has_due",
    "mark_failed",
    "mark_notified",
    "notification_state",
    "release",
]

#: The longest failure text kept (a receiver's error can be anything).
MAX_ERROR_CHARS = 500

#: Due: pending, unexpired, not notified, its retry time reached, not leased. The
#: four ``?`` all take "now".
_DUE = (
    "status = 'pending' AND notified_us IS NULL AND expires_us > ? "
    "AND (notify_next_us IS NULL OR notify_next_us <= ?) "
    "AND (notify_claimed_until_us IS NULL OR notify_claimed_until_us <= ?)"
)
_DUE_PARAMS = 3


@dataclass(frozen=True, slots=True)
class NotificationClaim:
    """One approval a dispatcher holds the lease on, until ``lease_until_us``.

    ``attempt`` numbers this delivery (1 for the first; a delivery whose dispatcher
    died counts too). ``lease_until_us`` is also the fencing token of
    :func:`mark_failed` and :func:`release`."""

    record: ApprovalRecord
    attempt: int
    lease_until_us: int


@dataclass(frozen=True, slots=True)
class NotificationState:
    """Where an approval's notice stands (for operators and tests)."""

    notified_us: int | None
    attempts: int
    next_us: int | None
    claimed_until_us: int | None
    error: str | None


def has_due(store: SqlStore, *, now: int | None = None) -> bool:
    """Whether any approval is due, read without a write lock: an idle dispatcher
    polls with this, so that SQLite's single write lock is taken only for work."""
    now = store.clock() if now is None else now
    with store.transaction(write=False) as cur:
        cur.execute(store.q(f"SELECT 1 FROM approvals WHERE {_DUE} LIMIT 1"), (now,) * _DUE_PARAMS)
        return cur.fetchone() is not None


def claim_due(
    store: SqlStore, *, limit: int, lease_us: int, now: int | None = None
) -> list[NotificationClaim]:
    """Lease up to ``limit`` due approvals, oldest first, for ``lease_us``; count an
    attempt on each. Atomic across threads, processes and replicas."""
    if limit < 1 or lease_us < 1:
        raise ValueError("claim_due needs a positive limit and lease")
    now = store.clock() if now is None else now
    until = now + lease_us
    sql = (
        f"WITH due AS MATERIALIZED (SELECT id FROM approvals WHERE {_DUE} "
        f"ORDER BY created_us, id LIMIT {int(limit)}{store.skip_locked}) "
        "UPDATE approvals SET notify_claimed_until_us = ?, "
        "notify_attempts = notify_attempts + 1 "
        f"WHERE id IN (SELECT id FROM due) AND {_DUE} "
        f"RETURNING {APPROVAL_COLUMNS}, notify_attempts"
    )
    with store.transaction(write=True) as cur:
        cur.execute(store.q(sql), ((now,) * _DUE_PARAMS + (until,) + (now,) * _DUE_PARAMS))
        rows = cur.fetchall()
    claims = [NotificationClaim(ApprovalRecord.from_row(row), int(row[-1]), until) for row in rows]
    return sorted(claims, key=lambda c: (c.record.created_us, c.record.id))


def mark_notified(store: SqlStore, approval_id: str, *, now: int | None = None) -> bool:
    """Record the delivery (a receiver answered 2xx) and drop the lease. Whoever
    delivered records it, lease or not: it *was* delivered. False when it had been
    recorded already (another replica delivered it too)."""
    now = store.clock() if now is None else now
    with store.transaction(write=True) as cur:
        cur.execute(
            store.q(
                "UPDATE approvals SET notified_us = ?, notify_claimed_until_us = NULL "
                "WHERE id = ? AND notified_us IS NULL"
            ),
            (now, approval_id),
        )
        return cur.rowcount == 1


def mark_failed(store: SqlStore, claim: NotificationClaim, error: str, *, retry_at_us: int) -> bool:
    """Record a failed delivery: keep ``error``, try again at ``retry_at_us``, give the
    lease back. False (and nothing changed) when the claim's lease is no longer the
    current one: another dispatcher took over."""
    with store.transaction(write=True) as cur:
        cur.execute(
            store.q(
                "UPDATE approvals SET notify_next_us = ?, notify_error = ?, "
                "notify_claimed_until_us = NULL "
                "WHERE id = ? AND notified_us IS NULL AND notify_claimed_until_us = ?"
            ),
            (retry_at_us, error[:MAX_ERROR_CHARS], claim.record.id, claim.lease_until_us),
        )
        return cur.rowcount == 1


def release(store: SqlStore, claims: Sequence[NotificationClaim]) -> int:
    """Give back leases that were never tried (their attempt uncounted), so another
    round delivers them at once; return how many were still held."""
    if not claims:
        return 0
    held = 0
    with store.transaction(write=True) as cur:
        for claim in claims:
            cur.execute(
                store.q(
                    "UPDATE approvals SET notify_claimed_until_us = NULL, "
                    "notify_attempts = notify_attempts - 1 "
                    "WHERE id = ? AND notified_us IS NULL AND notify_claimed_until_us = ?"
                ),
                (claim.record.id, claim.lease_until_us),
            )
            held += max(cur.rowcount, 0)
    return held


def notification_state(store: SqlStore, approval_id: str) -> NotificationState:
    """The notice state of one approval; ApprovalNotFound when there is none."""
    with store.transaction(write=False) as cur:
        cur.execute(
            store.q(
                "SELECT notified_us, notify_attempts, notify_next_us, notify_claimed_until_us, "
                "notify_error FROM approvals WHERE id = ?"
            ),
            (approval_id,),
        )
        row: Any = cur.fetchone()
    if row is None:
        raise ApprovalNotFound(f"no approval {approval_id!r}", approval_id=approval_id)
    return NotificationState(
        notified_us=_int_or_none(row[0]),
        attempts=int(row[1]),
        next_us=_int_or_none(row[2]),
        claimed_until_us=_int_or_none(row[3]),
        error=row[4],
    )


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)
