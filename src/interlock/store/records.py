"""What the store keeps, as plain records: audit rows, approvals, budgets,
reservations and the outcome of each stateful operation.

Times are integer microseconds since the epoch (``*_us``); amounts are integer units
(see :mod:`interlock.policy.specs`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

__all__ = [
    "APPROVAL_COLUMNS",
    "ApprovalRecord",
    "ApprovalStatus",
    "AuditRow",
    "BudgetLine",
    "BudgetRow",
    "ChainBreak",
    "ChainHead",
    "CheckpointProblem",
    "ClaimOutcome",
    "RateOutcome",
    "ReapResult",
    "Refusal",
    "Reservation",
    "ReservationStatus",
    "ReserveOutcome",
    "VerifyReport",
    "now_us",
]


def now_us() -> int:
    """The wall clock in integer microseconds."""
    return time.time_ns() // 1000


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    CLAIMED = "claimed"


class ReservationStatus(StrEnum):
    RESERVED = "reserved"
    COMMITTED = "committed"
    RELEASED = "released"
    EXPIRED = "expired"  # released by the reaper after its TTL


@dataclass(frozen=True, slots=True)
class AuditRow:
    """One link of a tenant's hash chain. ``body`` is the redacted record as stored
    (sorted-key JSON); ``hash`` covers every other field and ``prev_hash``.
    ``key_id`` names the audit key the link is HMAC'd under (``None``: unkeyed, plain
    SHA-256, or written before key ids existed)."""

    tenant: str
    seq: int
    ts_us: int
    kind: str
    decision_id: str | None
    agent: str | None
    decision: str | None
    body: str
    prev_hash: str
    hash: str
    key_id: str | None = None


class ChainHead(NamedTuple):
    """The newest record a commit wrote to one tenant's chain (what a signed
    checkpoint attests). A named tuple: one is made per append, on the check's path."""

    tenant: str
    seq: int
    hash: str
    key_id: str | None
    ts_us: int


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """The first broken link of a chain: where, and what is wrong."""

    tenant: str
    seq: int
    problem: str

    def __str__(self) -> str:
        return f"tenant {self.tenant!r}, record {self.seq}: {self.problem}"


@dataclass(frozen=True, slots=True)
class CheckpointProblem:
    """Something wrong in a checkpoint file: which file and line, and what."""

    file: str
    line: int
    problem: str

    def __str__(self) -> str:
        return f"{self.file}, line {self.line}: {self.problem}"


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What ``audit verify`` found: records checked per tenant, the breaks, and — when
    checked against signed checkpoints — what is wrong in their files. ``unkeyed``
    counts, per tenant, records that verified only as plain SHA-256; ``notes`` are
    observations that are not failures (a checkpoint stream without its end)."""

    checked: dict[str, int] = field(default_factory=dict)
    breaks: tuple[ChainBreak, ...] = ()
    unkeyed: dict[str, int] = field(default_factory=dict)
    checkpoint_problems: tuple[CheckpointProblem, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.breaks and not self.checkpoint_problems


#: The ``approvals`` columns :meth:`ApprovalRecord.from_row` reads, in its order.
APPROVAL_COLUMNS = (
    "id, tenant, intent_hash, status, action, context, rule_ids, reason, requested_by, "
    "decided_by, decision_reason, created_us, expires_us, decided_us, claimed_us"
)


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """One approval request, bound to one intent hash."""

    id: str
    tenant: str
    intent_hash: str
    status: ApprovalStatus
    action: dict[str, Any]  # redacted summary of the call
    context: dict[str, Any]  # the trusted context (agent, session, ...)
    rule_ids: tuple[str, ...]
    reason: str
    requested_by: str | None
    decided_by: str | None
    decision_reason: str | None
    created_us: int
    expires_us: int
    decided_us: int | None
    claimed_us: int | None

    @classmethod
    def from_row(cls, row: Any) -> ApprovalRecord:
        """The record from a row selected as :data:`APPROVAL_COLUMNS` (trailing
        columns ignored)."""
        return cls(
            id=str(row[0]),
            tenant=str(row[1]),
            intent_hash=str(row[2]),
            status=ApprovalStatus(row[3]),
            action=json.loads(row[4]),
            context=json.loads(row[5]),
            rule_ids=tuple(json.loads(row[6])),
            reason=str(row[7]),
            requested_by=row[8],
            decided_by=row[9],
            decision_reason=row[10],
            created_us=int(row[11]),
            expires_us=int(row[12]),
            decided_us=None if row[13] is None else int(row[13]),
            claimed_us=None if row[14] is None else int(row[14]),
        )

    @property
    def decided(self) -> bool:
        return self.status is not ApprovalStatus.PENDING

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tenant": self.tenant,
            "intent_hash": self.intent_hash,
            "status": self.status.value,
            "action": self.action,
            "context": self.context,
            "rule_ids": list(self.rule_ids),
            "reason": self.reason,
            "requested_by": self.requested_by,
            "decided_by": self.decided_by,
            "decision_reason": self.decision_reason,
            "created_us": self.created_us,
            "expires_us": self.expires_us,
            "decided_us": self.decided_us,
            "claimed_us": self.claimed_us,
        }


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    """What resolving an approval-gated call found: ``claimed`` (an approved grant,
    now used up: the call may run once), ``pending``, or ``denied``."""

    state: ApprovalStatus  # CLAIMED, PENDING or DENIED
    record: ApprovalRecord
    created: bool = False  # a new pending request was made by this call


@dataclass(frozen=True, slots=True)
class BudgetLine:
    """One budget a reservation draws on: which counter, its cap, and how much."""

    budget_id: str
    scope_key: str
    window_start: int
    unit: str
    cap: int
    amount: int

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.budget_id, self.scope_key, self.window_start)


@dataclass(frozen=True, slots=True)
class Reservation:
    id: str
    tenant: str
    idempotency_key: str
    status: ReservationStatus
    lines: tuple[BudgetLine, ...]
    created_us: int
    expires_us: int
    settled_us: int | None = None
    actual: dict[str, int] | None = None  # budget id -> units committed
    replayed: bool = False  # an earlier reserve with the same idempotency key

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tenant": self.tenant,
            "idempotency_key": self.idempotency_key,
            "status": self.status.value,
            "lines": [
                {
                    "budget_id": line.budget_id,
                    "scope_key": line.scope_key,
                    "window_start": line.window_start,
                    "unit": line.unit,
                    "cap": line.cap,
                    "amount": line.amount,
                }
                for line in self.lines
            ],
            "created_us": self.created_us,
            "expires_us": self.expires_us,
            "settled_us": self.settled_us,
            "actual": self.actual,
        }


@dataclass(frozen=True, slots=True)
class Refusal:
    """A budget that could not take a reservation, with its state at that moment."""

    line: BudgetLine
    spent: int
    reserved: int

    @property
    def available(self) -> int:
        return max(0, self.line.cap - self.spent - self.reserved)


@dataclass(frozen=True, slots=True)
class ReserveOutcome:
    """Either a reservation or the refusal that stopped it."""

    reservation: Reservation | None
    refusal: Refusal | None = None


@dataclass(frozen=True, slots=True)
class BudgetRow:
    tenant: str
    budget_id: str
    scope_key: str
    window_start: int
    unit: str
    cap: int
    spent: int
    reserved: int
    overage: int
    updated_us: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "budget_id": self.budget_id,
            "scope_key": self.scope_key,
            "window_start": self.window_start,
            "unit": self.unit,
            "cap": self.cap,
            "spent": self.spent,
            "reserved": self.reserved,
            "overage": self.overage,
            "updated_us": self.updated_us,
        }


@dataclass(frozen=True, slots=True)
class RateOutcome:
    allowed: bool
    retry_after: float = 0.0  # seconds until one more would be allowed


@dataclass(frozen=True, slots=True)
class ReapResult:
    reservations: int = 0
    approvals: int = 0
