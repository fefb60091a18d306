"""What the store keeps, as plain records: audit rows, approvals, budgets,
reservations and the outcome of each stateful operation.

Times are integer microseconds since the epoch (``*_us``); amounts are integer units
(see :mod:`interlock.policy.specs`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, Final, Literal, NamedTuple

__all__ = [
    "ANY_AGENT",
    "APPROVAL_COLUMNS",
    "AnyAgent",
    "ApprovalRecord",
    "ApprovalStatus",
    "AuditRow",
    "BudgetClosure",
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
    "Settler",
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
    EXPIRED = "expired"  # charged in full by the reaper after its TTL (it may have run)


class AnyAgent(Enum):
    """The type of :data:`ANY_AGENT`."""

    ANY_AGENT = "any agent"


#: Settles a reservation whoever made it (an admin key; the reaper).
ANY_AGENT: Final = AnyAgent.ANY_AGENT
#: Who settles a reservation: the agent that made it (its identity, ``None`` for a
#: call without one), or :data:`ANY_AGENT`.
Settler = str | None | Literal[AnyAgent.ANY_AGENT]


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
    "decided_by, decision_reason, created_us, expires_us, decided_us, claimed_us, "
    "grant_ttl_us, severity, tool_description, tool_description_from"
)


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """One approval request, bound to one intent hash. ``grant_ttl_us`` is how long
    an approval of it stays claimable (a denial, in force); ``severity`` the highest
    severity the rules that asked for it declare, ``tool_description`` what the tool
    is said to do (``None``: not declared) and ``tool_description_from`` who says so:
    ``"policy"`` (its ``tools`` section) or ``"agent"`` (the framework the call came
    from: the agent's own claim)."""

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
    grant_ttl_us: int | None = None
    severity: str | None = None
    tool_description: str | None = None
    tool_description_from: str | None = None

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
            grant_ttl_us=None if row[15] is None else int(row[15]),
            severity=row[16],
            tool_description=row[17],
            tool_description_from=row[18],
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
            "grant_ttl_us": self.grant_ttl_us,
            "severity": self.severity,
            "tool_description": self.tool_description,
            "tool_description_from": self.tool_description_from,
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
    """One budget a reservation draws on: which counter, its cap, how much, and the
    ``headroom`` it holds besides: how far the call may run past ``amount`` before the
    excess closes the budget (the budget's ``max_overage``). The budget admits the line
    only while everything it holds, headroom included, stays within the cap."""

    budget_id: str
    scope_key: str
    window_start: int
    unit: str
    cap: int
    amount: int
    headroom: int = 0

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.budget_id, self.scope_key, self.window_start)

    @property
    def held(self) -> int:
        """What the line holds against the cap while it is in flight."""
        return self.amount + self.headroom


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
    # budget id -> units the call used (committed), or charged by the reaper (expired)
    actual: dict[str, int] | None = None
    replayed: bool = False  # an earlier reserve with the same idempotency key
    owner: str | None = None  # the agent that made it: only it (or an admin) settles it

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tenant": self.tenant,
            "idempotency_key": self.idempotency_key,
            "status": self.status.value,
            "owner": self.owner,
            "lines": [
                {
                    "budget_id": line.budget_id,
                    "scope_key": line.scope_key,
                    "window_start": line.window_start,
                    "unit": line.unit,
                    "cap": line.cap,
                    "amount": line.amount,
                    "headroom": line.headroom,
                }
                for line in self.lines
            ],
            "created_us": self.created_us,
            "expires_us": self.expires_us,
            "settled_us": self.settled_us,
            "actual": self.actual,
        }


@dataclass(frozen=True, slots=True)
class BudgetClosure:
    """A budget counter closed because a call ran past its reservation and its
    ``max_overage``: it admits nothing, in any window, until an admin reopens it.
    ``excess`` is what ran past (summed over every overrun while it was closed)."""

    tenant: str
    budget_id: str
    scope_key: str
    closed_us: int
    reservation_id: str
    excess: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "budget_id": self.budget_id,
            "scope_key": self.scope_key,
            "closed_us": self.closed_us,
            "reservation_id": self.reservation_id,
            "excess": self.excess,
        }


@dataclass(frozen=True, slots=True)
class Refusal:
    """A budget that could not take a reservation, with its state at that moment:
    full (``spent + reserved + headroom`` left no room for the line), or ``closed``."""

    line: BudgetLine
    spent: int
    reserved: int
    headroom: int = 0
    closed: BudgetClosure | None = None

    @property
    def available(self) -> int:
        """Units a line (with its own headroom) may still hold."""
        return max(0, self.line.cap - self.spent - self.reserved - self.headroom)


@dataclass(frozen=True, slots=True)
class ReserveOutcome:
    """Either a reservation or the refusal that stopped it."""

    reservation: Reservation | None
    refusal: Refusal | None = None


@dataclass(frozen=True, slots=True)
class BudgetRow:
    """One budget counter. ``reserved`` and ``headroom`` are held by calls in flight;
    ``overage`` is what commits charged beyond their reservations, ``excess`` the part
    of it beyond their ``max_overage`` as well. ``closed_us``: when an excess closed
    the counter (``None``: open)."""

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
    headroom: int = 0
    excess: int = 0
    closed_us: int | None = None

    @property
    def available(self) -> int:
        return max(0, self.cap - self.spent - self.reserved - self.headroom)

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
            "headroom": self.headroom,
            "overage": self.overage,
            "excess": self.excess,
            "closed_us": self.closed_us,
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
