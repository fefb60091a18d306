"""The approval webhook's bookkeeping, in SQL both back ends run: which approvals are
due a notice, the lease a dispatcher takes on them, and what became of a delivery.

There are two notices per approval, each with its own state in nullable columns of
``approvals``, so that opening or deciding one writes nothing more for it:

- ``approval.requested`` (migration 0003: ``notified_us``, ``notify_*``) is **due**
  while the approval is pending and unexpired, not yet notified, its
  ``notify_next_us`` (NULL: at once) has passed, and no dispatcher holds a live lease
  on it.
- ``approval.decided`` (migration 0004: ``decided_notified_us``,
  ``decided_notify_*``) is **due** once a human decided the approval
  (``decided_by``: approved, denied, claimed, or expired after approval — not one that
  expired while pending), its requested notice was delivered (``notified_us``: there
  is a message to update; a decision that came first gets neither), it is not yet
  notified, its retry time has passed, no dispatcher holds a live lease, and the
  decision is less than :data:`DECIDED_GIVE_UP_US` old: a receiver gone for good
  must not leave work piling up for ever.

Every function takes the ``event`` (``approval.requested`` unless told); a
:class:`NotificationClaim` carries its own. Claiming is one statement that sets the
lease::

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

A lease is fenced by its own value (``notify_claimed_until_us``, or
``decided_notify_claimed_until_us``): only the holder of the current lease can
release it or record a failure, so a dispatcher whose lease lapsed cannot overwrite
the replica that took over.

Example::

    claims = claim_due(store, limit=10, lease_us=30_000_000)
    for claim in claims:
        ...  # deliver claim.record
        mark_notified(store, claim.record.id)
    decided = claim_due(store, limit=10, lease_us=30_000_000, event=DECIDED)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from interlock.core.redaction import Redactor
from interlock.errors import ApprovalNotFound
from interlock.store.records import APPROVAL_COLUMNS, ApprovalRecord
from interlock.store.sql import SqlStore

__all__ = [
    "DECIDED",
    "DECIDED_GIVE_UP_US",
    "REQUESTED",
    "NotificationClaim",
    "NotificationEvent",
    "NotificationState",
    "claim_due",
    "has_due",
    "mark_failed",
    "mark_notified",
    "notification_state",
    "release",
]

#: The notice of a new approval.
REQUESTED: Final = "approval.requested"
#: The notice of a human's decision on an approval whose request was delivered.
DECIDED: Final = "approval.decided"
#: The events there is a notice of.
NotificationEvent = Literal["approval.requested", "approval.decided"]

#: How long after its decision an ``approval.decided`` notice is still tried, in
#: microseconds (a day); after that it is given up, never sent.
DECIDED_GIVE_UP_US: Final = 24 * 3600 * 1_000_000

#: The longest failure text kept (a receiver's error can be anything).
MAX_ERROR_CHARS = 500
_REDACTOR = Redactor()  # a failure text is redacted before it is cut to MAX_ERROR_CHARS


@dataclass(frozen=True, slots=True)
class _Notice:
    """One event's notice: its columns on ``approvals``, when it is due, and the order
    claims take it in (oldest first, by ``order``)."""

    notified: str
    attempts: str
    next: str
    claimed_until: str
    error: str
    #: Due; the first ``?`` takes ``now - cutoff_us``, the other two "now".
    due: str
    cutoff_us: int
    order: str

    def due_params(self, now: int) -> tuple[int, ...]:
        return (now - self.cutoff_us, now, now)

    def order_key(self, record: ApprovalRecord) -> tuple[int, str]:
        """Where a claimed record sorts: the record's field named as the column."""
        return (getattr(record, self.order) or 0, record.id)


_NOTICES: Final[dict[str, _Notice]] = {
    # Pending, unexpired (the cut-off is now itself), not notified, its retry time
    # reached, not leased.
    REQUESTED: _Notice(
        notified="notified_us",
        attempts="notify_attempts",
        next="notify_next_us",
        claimed_until="notify_claimed_until_us",
        error="notify_error",
        due=(
            "status = 'pending' AND notified_us IS NULL AND expires_us > ? "
            "AND (notify_next_us IS NULL OR notify_next_us <= ?) "
            "AND (notify_claimed_until_us IS NULL OR notify_claimed_until_us <= ?)"
        ),
        cutoff_us=0,
        order="created_us",
    ),
    # Decided by a human less than a day ago, its request delivered, not notified,
    # its retry time reached, not leased. The first three terms are the partial
    # index's condition (migration 0004), written as it is so that both back ends
    # see the index applies.
    DECIDED: _Notice(
        notified="decided_notified_us",
        attempts="decided_notify_attempts",
        next="decided_notify_next_us",
        claimed_until="decided_notify_claimed_until_us",
        error="decided_notify_error",
        due=(
            "decided_by IS NOT NULL AND notified_us IS NOT NULL "
            "AND decided_notified_us IS NULL AND decided_us > ? "
            "AND (decided_notify_next_us IS NULL OR decided_notify_next_us <= ?) "
            "AND (decided_notify_claimed_until_us IS NULL "
            "OR decided_notify_claimed_until_us <= ?)"
        ),
        cutoff_us=DECIDED_GIVE_UP_US,
        order="decided_us",
    ),
}


def _notice(event: str) -> _Notice:
    notice = _NOTICES.get(event)
    if notice is None:
        raise ValueError(f"no notice of {event!r}: it is one of {', '.join(_NOTICES)}")
    return notice


@dataclass(frozen=True, slots=True)
class NotificationClaim:
    """One approval's ``event`` notice a dispatcher holds the lease on, until
    ``lease_until_us``.

    ``attempt`` numbers this delivery (1 for the first; a delivery whose dispatcher
    died counts too). ``lease_until_us`` is also the fencing token of
    :func:`mark_failed` and :func:`release`."""

    record: ApprovalRecord
    attempt: int
    lease_until_us: int
    event: NotificationEvent = REQUESTED


@dataclass(frozen=True, slots=True)
class NotificationState:
    """Where an approval's notice stands (for operators and tests)."""

    notified_us: int | None
    attempts: int
    next_us: int | None
    claimed_until_us: int | None
    error: str | None


def has_due(
    store: SqlStore, *, now: int | None = None, event: NotificationEvent = REQUESTED
) -> bool:
    """Whether any approval is due an ``event`` notice, read without a write lock: an
    idle dispatcher polls with this, so that SQLite's single write lock is taken only
    for work."""
    notice = _notice(event)
    now = store.clock() if now is None else now
    with store.transaction(write=False) as cur:
        cur.execute(
            store.q(f"SELECT 1 FROM approvals WHERE {notice.due} LIMIT 1"), notice.due_params(now)
        )
        return cur.fetchone() is not None


def claim_due(
    store: SqlStore,
    *,
    limit: int,
    lease_us: int,
    now: int | None = None,
    event: NotificationEvent = REQUESTED,
) -> list[NotificationClaim]:
    """Lease up to ``limit`` approvals due an ``event`` notice, oldest first (opened,
    or decided), for ``lease_us``; count an attempt on each. Atomic across threads,
    processes and replicas."""
    notice = _notice(event)
    if limit < 1 or lease_us < 1:
        raise ValueError("claim_due needs a positive limit and lease")
    now = store.clock() if now is None else now
    until = now + lease_us
    sql = (
        f"WITH due AS MATERIALIZED (SELECT id FROM approvals WHERE {notice.due} "
        f"ORDER BY {notice.order}, id LIMIT {int(limit)}{store.skip_locked}) "
        f"UPDATE approvals SET {notice.claimed_until} = ?, "
        f"{notice.attempts} = {notice.attempts} + 1 "
        f"WHERE id IN (SELECT id FROM due) AND {notice.due} "
        f"RETURNING {APPROVAL_COLUMNS}, {notice.attempts}"
    )
    with store.transaction(write=True) as cur:
        cur.execute(store.q(sql), (*notice.due_params(now), until, *notice.due_params(now)))
        rows = cur.fetchall()
    claims = [
        NotificationClaim(ApprovalRecord.from_row(row), int(row[-1]), until, event) for row in rows
    ]
    return sorted(claims, key=lambda c: notice.order_key(c.record))


def mark_notified(
    store: SqlStore,
    approval_id: str,
    *,
    now: int | None = None,
    event: NotificationEvent = REQUESTED,
) -> bool:
    """Record the ``event`` delivery (a receiver answered 2xx) and drop the lease.
    Whoever delivered records it, lease or not: it *was* delivered. False when it had
    been recorded already (another replica delivered it too)."""
    notice = _notice(event)
    now = store.clock() if now is None else now
    with store.transaction(write=True) as cur:
        cur.execute(
            store.q(
                f"UPDATE approvals SET {notice.notified} = ?, {notice.claimed_until} = NULL "
                f"WHERE id = ? AND {notice.notified} IS NULL"
            ),
            (now, approval_id),
        )
        return cur.rowcount == 1


def mark_failed(store: SqlStore, claim: NotificationClaim, error: str, *, retry_at_us: int) -> bool:
    """Record a failed delivery of the claim's notice: keep ``error``, try again at
    ``retry_at_us``, give the lease back. False (and nothing changed) when the claim's
    lease is no longer the current one: another dispatcher took over."""
    notice = _notice(claim.event)
    with store.transaction(write=True) as cur:
        cur.execute(
            store.q(
                f"UPDATE approvals SET {notice.next} = ?, {notice.error} = ?, "
                f"{notice.claimed_until} = NULL "
                f"WHERE id = ? AND {notice.notified} IS NULL AND {notice.claimed_until} = ?"
            ),
            (
                retry_at_us,
                _REDACTOR.cut(error, MAX_ERROR_CHARS, ellipsis=""),
                claim.record.id,
                claim.lease_until_us,
            ),
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
            notice = _notice(claim.event)
            cur.execute(
                store.q(
                    f"UPDATE approvals SET {notice.claimed_until} = NULL, "
                    f"{notice.attempts} = {notice.attempts} - 1 "
                    f"WHERE id = ? AND {notice.notified} IS NULL AND {notice.claimed_until} = ?"
                ),
                (claim.record.id, claim.lease_until_us),
            )
            held += max(cur.rowcount, 0)
    return held


def notification_state(
    store: SqlStore, approval_id: str, *, event: NotificationEvent = REQUESTED
) -> NotificationState:
    """The state of one approval's ``event`` notice; ApprovalNotFound when there is
    no such approval."""
    notice = _notice(event)
    with store.transaction(write=False) as cur:
        cur.execute(
            store.q(
                f"SELECT {notice.notified}, {notice.attempts}, {notice.next}, "
                f"{notice.claimed_until}, {notice.error} FROM approvals WHERE id = ?"
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
