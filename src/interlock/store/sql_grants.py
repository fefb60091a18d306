"""Grants in SQL: each issued once (at most one per decision) and claimed at most once.

A claim is one conditional ``UPDATE ... SET status = 'claimed' WHERE id = ? AND status
= 'issued' AND expires_us > now ...`` — never a read followed by a write — so of any
number of threads, processes or replicas claiming the same grant exactly one wins.
Only when the ``UPDATE`` matched nothing is the row read, to say why (claimed before,
expired, unknown). Issuing and claiming are audited in the tenant's chain, in the
same transaction as the change they record; a refused claim of a grant we issued is
audited too (a replay is worth a record).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from interlock.errors import GrantExpired, GrantInvalid, GrantReplayed
from interlock.store.chain import encode_body
from interlock.store.grant_keys import GrantKeys
from interlock.store.sql_audit import AuditStore
from interlock.store.sql_base import AuditEntry, Cursor

__all__ = ["GRANT_COLUMNS", "GrantRecord", "GrantStore"]

#: The ``grants`` columns :meth:`GrantRecord.from_row` reads, in its order.
GRANT_COLUMNS: Final = (
    "id, tenant, intent_hash, audience, agent, kid, binding, decision_id, approval_id, "
    "issued_us, expires_us, status, claimed_us"
)


@dataclass(frozen=True, slots=True)
class GrantRecord:
    """One grant as the store keeps it (``status``: ``issued`` or ``claimed``; a grant
    past ``expires_us`` that was never claimed reads as ``expired``)."""

    id: str
    tenant: str
    intent_hash: str
    audience: str
    agent: str | None
    kid: str
    binding: str | None
    decision_id: str | None
    approval_id: str | None
    issued_us: int
    expires_us: int
    status: str
    claimed_us: int | None

    @classmethod
    def from_row(cls, row: Any) -> GrantRecord:
        return cls(
            id=str(row[0]),
            tenant=str(row[1]),
            intent_hash=str(row[2]),
            audience=str(row[3]),
            agent=row[4],
            kid=str(row[5]),
            binding=row[6],
            decision_id=row[7],
            approval_id=row[8],
            issued_us=int(row[9]),
            expires_us=int(row[10]),
            status=str(row[11]),
            claimed_us=None if row[12] is None else int(row[12]),
        )

    def as_of(self, now_us: int) -> str:
        """The status at ``now_us``: an unclaimed grant past its expiry is ``expired``."""
        if self.status == "issued" and self.expires_us <= now_us:
            return "expired"
        return self.status

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


class GrantStore(AuditStore):
    """Grants: issue (insert + audit), claim (one conditional update + audit), read.
    ``grant_keys`` is where the signing keys are (set by the back end)."""

    grant_keys: GrantKeys = GrantKeys(source="none given")

    def insert_grant(self, record: GrantRecord) -> bool:
        """Store an issued grant and its audit record in one transaction. False when
        the decision already has a grant (nothing is written then)."""
        with self.transaction(write=True) as cur:
            cur.execute(
                self.q(
                    f"INSERT INTO grants ({GRANT_COLUMNS}) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'issued', NULL) "
                    "ON CONFLICT (tenant, decision_id) WHERE decision_id IS NOT NULL "
                    "DO NOTHING RETURNING id"
                ),
                (
                    record.id,
                    record.tenant,
                    record.intent_hash,
                    record.audience,
                    record.agent,
                    record.kid,
                    record.binding,
                    record.decision_id,
                    record.approval_id,
                    record.issued_us,
                    record.expires_us,
                ),
            )
            if cur.fetchone() is None:
                return False
            self._append(cur, [_grant_entry(record, "issued", record.issued_us)])
        return True

    def claim_grant_record(
        self, grant_id: str, *, tenant: str, intent_hash: str, audience: str, kid: str
    ) -> GrantRecord:
        """Claim the grant, once: the claimed record, or :class:`GrantReplayed` (claimed
        before), :class:`GrantExpired` (past its expiry), :class:`GrantInvalid` (no
        such grant, or one issued for another intent, audience or key)."""
        now = self.clock()
        with self.transaction(write=True) as cur:
            cur.execute(
                self.q(
                    "UPDATE grants SET status = 'claimed', claimed_us = ? "
                    "WHERE id = ? AND tenant = ? AND intent_hash = ? AND audience = ? "
                    "AND kid = ? AND status = 'issued' AND expires_us > ? "
                    f"RETURNING {GRANT_COLUMNS}"
                ),
                (now, grant_id, tenant, intent_hash, audience, kid, now),
            )
            row = cur.fetchone()
            if row is not None:
                record = GrantRecord.from_row(row)
                self._append(cur, [_grant_entry(record, "claimed", now)])
                return record
            refusal = self._grant_refusal(cur, grant_id, tenant, intent_hash, audience, kid, now)
        raise refusal

    def _grant_refusal(
        self,
        cur: Cursor,
        grant_id: str,
        tenant: str,
        intent_hash: str,
        audience: str,
        kid: str,
        now: int,
    ) -> Exception:
        """Why a claim matched nothing (read after the update failed: it only names
        the reason, it decides nothing). A refusal of a grant we hold is audited."""
        cur.execute(
            self.q(f"SELECT {GRANT_COLUMNS} FROM grants WHERE id = ? AND tenant = ?"),
            (grant_id, tenant),
        )
        row = cur.fetchone()
        if row is None:
            return GrantInvalid(f"no grant {grant_id!r} was issued to tenant {tenant!r}")
        record = GrantRecord.from_row(row)
        refusal: Exception
        if (record.intent_hash, record.audience, record.kid) != (intent_hash, audience, kid):
            refusal = GrantInvalid(
                f"grant {grant_id!r} was issued for another intent, audience or key than "
                "its token says"
            )
        elif record.status == "claimed":
            refusal = GrantReplayed(f"grant {grant_id!r} was claimed already")
        elif record.expires_us <= now:
            refusal = GrantExpired(f"grant {grant_id!r} expired before it was claimed")
        else:  # pragma: no cover - the update would have matched
            refusal = GrantInvalid(f"grant {grant_id!r} could not be claimed")
        body = {"refused": getattr(refusal, "code", "grant_error")}
        self._append(cur, [_grant_entry(record, "claim_refused", now, body)])
        return refusal

    def get_grant(self, grant_id: str, *, tenant: str | None = None) -> GrantRecord | None:
        """The grant, or ``None`` (also for one of another tenant)."""
        with self.transaction(write=False) as cur:
            cur.execute(self.q(f"SELECT {GRANT_COLUMNS} FROM grants WHERE id = ?"), (grant_id,))
            row = cur.fetchone()
        if row is None or (tenant is not None and row[1] != tenant):
            return None
        return GrantRecord.from_row(row)

    def list_grants(self, *, tenant: str | None = None, limit: int = 100) -> list[GrantRecord]:
        """Grants, newest first."""
        sql = f"SELECT {GRANT_COLUMNS} FROM grants"
        params: list[Any] = []
        if tenant is not None:
            sql += " WHERE tenant = ?"
            params.append(tenant)
        sql += f" ORDER BY issued_us DESC, id LIMIT {int(limit)}"
        with self.transaction(write=False) as cur:
            cur.execute(self.q(sql), params)
            return [GrantRecord.from_row(row) for row in cur.fetchall()]


def _grant_entry(
    record: GrantRecord, event: str, ts_us: int, extra: Mapping[str, Any] | None = None
) -> AuditEntry:
    """The audit record of a grant issued, claimed or refused: kind ``grant``."""
    body: dict[str, Any] = {
        "kind": "grant",
        "event": event,
        "grant_id": record.id,
        "intent_hash": record.intent_hash,
        "audience": record.audience,
        "kid": record.kid,
        "binding": record.binding,
        "approval_id": record.approval_id,
        "expires_us": record.expires_us,
        **(extra or {}),
    }
    return (
        record.tenant,
        ts_us,
        "grant",
        record.decision_id,
        record.agent,
        None,
        encode_body(body),
    )
