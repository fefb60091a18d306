"""Approvals in SQL: one open request per intent, decided once (never by the one who
asked, under any name that is the same identity: :mod:`interlock.core.identity`), a
grant claimed exactly once, waiting for a decision."""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from interlock.core.identity import identity_forms, same_identity, visible_name
from interlock.core.redaction import Redactor
from interlock.errors import ApprovalClosed, ApprovalNotFound, ReasonRequired, SelfApproval
from interlock.store.chain import encode_body
from interlock.store.records import (
    APPROVAL_COLUMNS,
    ApprovalRecord,
    ApprovalStatus,
    ClaimOutcome,
)
from interlock.store.sql_audit import AuditStore
from interlock.store.sql_base import AuditEntry, Cursor, compact_json

__all__ = ["ApprovalStore", "HistoryCursor", "closed_at", "has_words"]


class ApprovalStore(AuditStore):
    """Approval requests and their decisions (each decision audited in its own
    transaction, hence on top of :class:`AuditStore`)."""

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
        severity: str | None = None,
        tool_description: str | None = None,
        tool_description_from: str | None = None,
    ) -> ClaimOutcome:
        """For a call that needs approval: claim an approved grant for this exact
        intent (atomically, once), or find the pending request, or a standing denial,
        or open a new pending request (with the ``severity`` its rules declare and the
        tool's description, for the approver)."""
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
                    f"INSERT INTO approvals ({APPROVAL_COLUMNS}) "
                    "VALUES (?, ?, ?, 'pending', ?, ?, ?, ?, ?, NULL, NULL, ?, ?, NULL, NULL, "
                    "?, ?, ?, ?) "
                    "ON CONFLICT (tenant, intent_hash) WHERE status IN ('pending', 'approved') "
                    f"DO NOTHING RETURNING {APPROVAL_COLUMNS}"
                ),
                (
                    approval_id,
                    tenant,
                    intent_hash,
                    compact_json(action),
                    compact_json(context),
                    compact_json(list(rule_ids)),
                    reason,
                    requested_by,
                    now,
                    now + ttl_us,
                    grant_ttl_us,
                    severity,
                    tool_description,
                    tool_description_from if tool_description is not None else None,
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

    def approval_history(
        self, *, tenant: str, limit: int = 50, before: HistoryCursor | None = None
    ) -> tuple[list[ApprovalRecord], HistoryCursor | None]:
        """The tenant's approvals that left the queue — approved, used, denied or
        expired — newest first by when they left it (the decision; for one that
        expired undecided, its expiry), at most ``limit``, and the cursor of the next
        (older) page (``None``: this was the last). ``before`` continues from a cursor.

        Example::

            page, more = store.approval_history(tenant="acme", limit=20)
            older, _ = store.approval_history(tenant="acme", limit=20, before=more)
        """
        now = self.clock()
        where = [
            "tenant = ?",
            "(status IN ('approved', 'denied', 'claimed', 'expired') OR expires_us <= ?)",
        ]
        params: list[Any] = [tenant, now]
        if before is not None:
            where.append(f"({_CLOSED} < ? OR ({_CLOSED} = ? AND id < ?))")
            params.extend((before.closed_us, before.closed_us, before.id))
        sql = (
            f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE {' AND '.join(where)} "
            f"ORDER BY {_CLOSED} DESC, id DESC LIMIT {int(limit) + 1}"
        )
        with self.transaction(write=False) as cur:
            cur.execute(self.q(sql), params)
            records = [_as_of(ApprovalRecord.from_row(row), now) for row in cur.fetchall()]
        if len(records) <= limit:
            return records, None
        records = records[:limit]
        last = records[-1]
        return records, HistoryCursor(closed_at(last), last.id)

    def approve(
        self,
        approval_id: str,
        *,
        by: str,
        reason: str = "",
        tenant: str | None = None,
        require_reason: bool = False,
    ) -> ApprovalRecord:
        """Approve a pending request: the identical call, retried, may then run once.
        Refuses the requester itself, anything no longer pending and, with
        ``require_reason``, a blank ``reason`` (:class:`ReasonRequired`)."""
        return self._decide(
            approval_id, ApprovalStatus.APPROVED, by, reason, tenant, require_reason
        )

    def deny(
        self,
        approval_id: str,
        *,
        by: str,
        reason: str = "",
        tenant: str | None = None,
        require_reason: bool = False,
    ) -> ApprovalRecord:
        """Deny a pending request: the identical call is denied until the denial
        lapses (the policy's ``grant_ttl``). Refuses as :meth:`approve` does."""
        return self._decide(approval_id, ApprovalStatus.DENIED, by, reason, tenant, require_reason)

    def _decide(
        self,
        approval_id: str,
        status: ApprovalStatus,
        by: str,
        reason: str,
        tenant: str | None,
        require_reason: bool = False,
    ) -> ApprovalRecord:
        approver = by.strip() if isinstance(by, str) else ""
        if not identity_forms(approver):  # empty, or nothing in it that can be seen
            raise SelfApproval(
                "an approver identity is required to decide an approval", approval_id=approval_id
            )
        now = self.clock()
        lapsed = False
        with self.transaction(write=True) as cur:
            record = self._read_approval(cur, approval_id, tenant)
            if same_identity(record.requested_by, approver):
                raise SelfApproval(_self_approval(approver, record), approval_id=approval_id)
            if record.status is not ApprovalStatus.PENDING:
                raise ApprovalClosed(
                    f"approval {approval_id} is {record.status.value}, not pending",
                    approval_id=approval_id,
                )
            if require_reason and not has_words(reason):
                raise ReasonRequired(
                    f"a reason is required to {_VERBS[status]} approval {approval_id}: "
                    "say why (it is kept with the decision and in the audit log)",
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


_REDACTOR = Redactor()
_VERBS = {ApprovalStatus.APPROVED: "approve", ApprovalStatus.DENIED: "deny"}
#: When an approval left the queue (the history's order): its decision, or its expiry.
_CLOSED = "COALESCE(decided_us, expires_us)"


def has_words(reason: object) -> bool:
    """Whether ``reason`` says anything: a string with something visible in it (not
    only spaces, line breaks or invisible format characters such as U+200B)."""
    return isinstance(reason, str) and bool(visible_name(reason))


def closed_at(record: ApprovalRecord) -> int:
    """When ``record`` left the queue: its decision, or (undecided) its expiry."""
    return record.decided_us if record.decided_us is not None else record.expires_us


@dataclass(frozen=True, slots=True)
class HistoryCursor:
    """Where a page of :meth:`ApprovalStore.approval_history` ends: the time the last
    approval on it left the queue, and its id. As text (``str()``), ``<us>.<id>``."""

    closed_us: int
    id: str

    def __str__(self) -> str:
        return f"{self.closed_us}.{self.id}"

    @classmethod
    def parse(cls, text: str) -> HistoryCursor:
        """The cursor ``str()`` wrote; ``ValueError`` for anything else."""
        match = _CURSOR.fullmatch(text)
        if match is None or int(match.group(1)) >= 2**63:  # a BIGINT holds the time
            raise ValueError(f"not a history cursor: {text[:80]!r}")
        return cls(int(match.group(1)), match.group(2))


_CURSOR = re.compile(r"([0-9]{1,19})\.([A-Za-z0-9_-]{1,64})")


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


def _self_approval(approver: str, record: ApprovalRecord) -> str:
    """Why ``approver`` may not decide ``record``: it is the requester, or a name
    that is the requester's identity written another way (see
    :mod:`interlock.core.identity`)."""
    if approver == record.requested_by:
        return f"{approver!r} requested approval {record.id} and cannot decide it"
    return (
        f"{approver!r} is the same identity as {record.requested_by!r}, which requested "
        f"approval {record.id}: it cannot decide it"
    )


def _as_of(record: ApprovalRecord, now: int) -> ApprovalRecord:
    """The record as it stands at ``now``: an open one past its expiry is expired,
    whether or not the reaper has marked it yet."""
    lapsed = record.status in (ApprovalStatus.PENDING, ApprovalStatus.APPROVED)
    if lapsed and record.expires_us <= now:
        return replace(record, status=ApprovalStatus.EXPIRED)
    return record
