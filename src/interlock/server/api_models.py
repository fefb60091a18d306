"""The HTTP API's request and response bodies: the same pydantic models validate the
requests and write the OpenAPI document, so the two cannot drift.

Amounts are integer *units*, as the store keeps them: micro-units of a currency
(1 USD = 1 000 000) or tokens. Times are integer microseconds since the epoch
(``*_us``).
"""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from interlock.core.decision import Decision
from interlock.core.redaction import Redactor
from interlock.errors import describe
from interlock.server.keys import ApiKey
from interlock.store.records import (
    ApprovalRecord,
    AuditRow,
    BudgetClosure,
    BudgetRow,
    Refusal,
    Reservation,
)

if TYPE_CHECKING:
    from interlock.approvals.grants import Grant

__all__ = [
    "ActionIn",
    "ApprovalHistory",
    "ApprovalList",
    "ApprovalOut",
    "AuditPage",
    "AuditRecordOut",
    "BatchIn",
    "BudgetList",
    "BudgetRowOut",
    "ClosureOut",
    "CommitIn",
    "ConfirmReloadIn",
    "ContextIn",
    "DecideIn",
    "DecisionOut",
    "ErrorOut",
    "GrantClaimsOut",
    "GrantOut",
    "HealthOut",
    "HeldReloadOut",
    "PolicyReloadOut",
    "ReadyOut",
    "ReleaseIn",
    "ReopenIn",
    "ReopenOut",
    "ReservationOut",
    "ReserveIn",
    "ReserveOut",
    "VerifyOut",
    "WhoAmIOut",
]

#: Identifiers and labels: printable, bounded (they reach indexed columns).
Label = Annotated[
    str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")
]
#: Free text: anything but NUL (which no database column takes), bounded.
Text = Annotated[str, StringConstraints(max_length=4000, pattern=r"^[^\x00]*$")]
#: Store ids (``apr_...``, ``res_...``).
RecordId = Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=r"^[\w-]+$")]
#: A count of units or tokens: a JSON integer (not 1.0, not "1", not true) from 0 to
#: 2**53, the most a budget counts.
Units = Annotated[int, Field(strict=True, ge=0, le=2**53)]
#: An amount to reserve: as :data:`Units`, at least 1.
PositiveUnits = Annotated[int, Field(strict=True, ge=1, le=2**53)]

Verdict = Literal["allow", "deny", "require_approval", "undetermined"]

#: How deep a caller's JSON (arguments, a tool schema) may nest.
MAX_DEPTH = 64
_SURROGATE = re.compile("[\ud800-\udfff]")


def plain_json(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` if it is JSON every store and hash can hold: no NaN or infinity, no
    lone UTF-16 surrogate, at most :data:`MAX_DEPTH` levels. (Python's JSON parser
    accepts the first two; they would fail later, far from the request.)"""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{item} is not a JSON number")
        if isinstance(item, str) and _SURROGATE.search(item):
            raise ValueError("a string holds a lone UTF-16 surrogate")
        if isinstance(item, dict):
            pending.extend((key, depth) for key in item)
            pending.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            pending.extend((child, depth + 1) for child in item)
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(plain_json)]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- check -------------------------------------------------------------------------------


class DownstreamIn(_In):
    system: Label
    operation: Label | None = None
    endpoint: Text | None = None


class ContextIn(_In):
    """The context fields a caller may state. ``tenant`` and ``agent`` are not among
    them: they come from the API key."""

    agent_type: Label | None = None
    runtime: Label | None = None
    session_id: Label | None = None
    run_id: Label | None = None
    call_id: Label | None = None
    idempotency_key: Label | None = None
    downstream: DownstreamIn | None = None


class ActionIn(_In):
    """One action, as :class:`interlock.Action` has it (without the trusted fields)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    kind: Literal["tool", "llm", "mcp", "browser", "effect"] = "tool"
    name: Label
    arguments: JsonObject = Field(default_factory=dict)
    target: Text | None = None
    scope: Label | None = None
    description: Text | None = None
    tool_schema: JsonObject | None = Field(
        None, alias="schema", description="The tool's declared JSON Schema of its parameters."
    )
    capabilities: list[Label] = Field(default_factory=list, max_length=100)
    context: ContextIn = Field(default_factory=ContextIn)
    unreadable: Text | None = Field(
        None,
        description=(
            "Set by a client that could not read the call it was asked to judge (a "
            "malformed request at a gateway): the server records it as undetermined, "
            "naming this problem, and decides nothing."
        ),
    )


class BatchIn(_In):
    """Actions that together make one call: the first that is not allowed halts it."""

    actions: list[ActionIn] = Field(min_length=1, max_length=100)

    @model_validator(mode="after")
    def _readable(self) -> BatchIn:
        if any(item.unreadable is not None for item in self.actions):
            raise ValueError("an unreadable call is recorded through /v1/check, never a batch")
        return self


class ApprovalRefOut(BaseModel):
    id: str | None
    status: str | None
    url: str | None


class AmountOut(BaseModel):
    budget_id: str
    amount: int
    unit: str


class ReservationRefOut(BaseModel):
    id: str
    amounts: list[AmountOut]


class ShadowOut(BaseModel):
    verdict: Verdict
    reason: str
    rule_ids: list[str]


class GrantClaimsOut(BaseModel):
    """What a grant says (``interlock.verify.tokens.GrantClaims``)."""

    grant_id: str
    issuer: str
    audience: str
    tenant: str
    agent: str | None
    intent_hash: str
    binding: str | None
    issued_at: int
    expires_at: int


class GrantOut(BaseModel):
    """An issued grant: the token to send downstream, what it says, its key's id."""

    token: str
    claims: GrantClaimsOut
    kid: str

    @classmethod
    def of(cls, grant: Grant) -> GrantOut:
        return cls(
            token=grant.token, claims=GrantClaimsOut(**grant.claims.as_dict()), kid=grant.kid
        )


class DecisionOut(BaseModel):
    """A verdict. ``approval`` is set for a call that needs (or used) an approval;
    ``reservation`` for an allowed call that holds budget (settle it with
    ``/v1/budgets/commit`` or ``/v1/budgets/release``); ``cause`` for undetermined;
    ``grant`` for an allow the policy asks a grant for (claim it with
    ``/v1/grants/claim``; verify it with ``/v1/keys/jwks.json``)."""

    verdict: Verdict
    reason: str
    rule_ids: list[str]
    decision_id: str
    approval: ApprovalRefOut | None = None
    reservation: ReservationRefOut | None = None
    shadow: ShadowOut | None = None
    cause: str | None = None
    fail_open: bool = False
    grant: GrantOut | None = None

    @classmethod
    def of(cls, decision: Decision, redactor: Redactor) -> DecisionOut:
        approval = decision.approval
        reservation = decision.reservation
        shadow = decision.shadow
        return cls(
            verdict=decision.verdict.value,
            reason=redactor.redact(decision.reason),
            rule_ids=list(decision.rule_ids),
            decision_id=decision.decision_id,
            approval=None
            if approval is None
            else ApprovalRefOut(id=approval.id, status=approval.status, url=approval.url),
            reservation=None
            if reservation is None
            else ReservationRefOut(
                id=reservation.id,
                amounts=[
                    AmountOut(budget_id=b, amount=a, unit=u) for b, a, u in reservation.amounts
                ],
            ),
            shadow=None
            if shadow is None
            else ShadowOut(
                verdict=shadow.verdict.value,
                reason=redactor.redact(shadow.reason),
                rule_ids=list(shadow.rule_ids),
            ),
            cause=None if decision.cause is None else redactor.redact(describe(decision.cause)),
            fail_open=decision.fail_open,
            grant=None if decision.grant is None else GrantOut.of(decision.grant),
        )


# -- approvals ---------------------------------------------------------------------------


class ApprovalOut(BaseModel):
    """One approval request, bound to one intent hash. ``requested_by`` is the name of
    the key whose check opened it; ``decided_by`` the name of the key that decided.
    Approving grants this identical call, once, until ``decided_us + grant_ttl_us``
    (for a pending one: that long after the approval)."""

    id: str
    tenant: str
    intent_hash: str
    status: Literal["pending", "approved", "denied", "expired", "claimed"]
    action: dict[str, Any]
    context: dict[str, Any]
    rule_ids: list[str]
    reason: str
    requested_by: str | None
    decided_by: str | None
    decision_reason: str | None
    created_us: int
    expires_us: int
    decided_us: int | None
    claimed_us: int | None
    grant_ttl_us: int | None = Field(
        None,
        description="How long an approval stays claimable by the identical call (a "
        "denial, in force), in microseconds from the decision.",
    )
    severity: Literal["low", "medium", "high", "critical"] | None = Field(
        None, description="The highest severity the rules that asked for it declare."
    )
    tool_description: str | None = Field(
        None, description="What the tool is said to do (redacted), if anyone says."
    )
    tool_description_from: Literal["policy", "agent"] | None = Field(
        None,
        description="Who says so: the policy's `tools` section, or the agent's framework "
        "(the agent's own claim).",
    )

    @classmethod
    def of(cls, record: ApprovalRecord) -> ApprovalOut:
        return cls.model_validate(record.as_dict())


class ApprovalList(BaseModel):
    approvals: list[ApprovalOut]
    reason_required: bool = Field(
        True, description="Whether this server refuses a decision without a reason."
    )


class ApprovalHistory(BaseModel):
    """A page of the approvals that left the queue, newest first by when they left it
    (the decision; for one that expired undecided, its expiry)."""

    approvals: list[ApprovalOut]
    next: str | None = Field(
        description="Pass as `before` for the next (older) page; null: this is the last."
    )
    reason_required: bool


class DecideIn(_In):
    reason: Text = Field(
        "",
        description="Why; kept with the decision and in the audit log. Required (not "
        "blank) unless the server runs with the reason optional: a blank one is then a "
        "422 `invalid_request` naming the field `reason`.",
    )


# -- budgets -----------------------------------------------------------------------------


class ReserveLineIn(_In):
    budget_id: Label
    amount: PositiveUnits = Field(
        description="Units: currency micro-units or tokens; from 1 to 2**53."
    )


class ReserveIn(_In):
    """Reserve on the policy's budgets, all lines or none. The scope key of each line
    (agent, session, tool, tenant) is worked out as for a check: the agent is the
    key's name. The same ``idempotency_key`` from the same key returns the first
    reservation again."""

    lines: list[ReserveLineIn] = Field(min_length=1, max_length=32)
    idempotency_key: Label | None = None
    ttl: float | None = Field(
        None, gt=0, le=86_400, allow_inf_nan=False, description="Seconds until released."
    )
    session_id: Label | None = None
    tool: Label | None = Field(None, description="The tool, for budgets scoped per tool.")


class UsageIn(_In):
    """What a model call really used, in tokens: integers from 0 to 2**53."""

    input_tokens: Units = 0
    output_tokens: Units = 0


class ReleaseIn(_In):
    reservation_id: RecordId


class CommitIn(_In):
    """Spend a reservation: what was reserved, or — given ``usage`` — what a call to
    ``model`` really used (priced by the policy for currency budgets), charged in full
    whatever was reserved. Only the key that made the reservation (its name), or an
    admin key, may commit it."""

    reservation_id: RecordId
    usage: UsageIn | None = None
    model: Label | None = None


class BudgetLineOut(BaseModel):
    budget_id: str
    scope_key: str
    window_start: int
    unit: str
    cap: int
    amount: int
    headroom: int = Field(description="Held besides the amount, for the call's overrun.")


class ReservationOut(BaseModel):
    id: str
    tenant: str
    idempotency_key: str
    status: Literal["reserved", "committed", "released", "expired"]
    owner: str | None = Field(description="The agent (key name) that made it.")
    lines: list[BudgetLineOut]
    created_us: int
    expires_us: int
    settled_us: int | None
    actual: dict[str, int] | None
    replayed: bool

    @classmethod
    def of(cls, reservation: Reservation) -> ReservationOut:
        return cls.model_validate({**reservation.as_dict(), "replayed": reservation.replayed})


class RefusalOut(BaseModel):
    budget_id: str
    scope_key: str
    unit: str
    cap: int
    amount: int
    spent: int
    reserved: int
    available: int
    closed: bool = Field(description="The budget is closed until an admin reopens it.")
    reason: str

    @classmethod
    def of(cls, refusal: Refusal, reason: str) -> RefusalOut:
        line = refusal.line
        return cls(
            budget_id=line.budget_id,
            scope_key=line.scope_key,
            unit=line.unit,
            cap=line.cap,
            amount=line.amount,
            spent=refusal.spent,
            reserved=refusal.reserved,
            available=refusal.available,
            closed=refusal.closed is not None,
            reason=reason,
        )


class ReserveOut(BaseModel):
    """``reserved`` with the reservation, or not, with the budget that refused."""

    reserved: bool
    reservation: ReservationOut | None = None
    refusal: RefusalOut | None = None


class BudgetRowOut(BaseModel):
    budget_id: str
    scope_key: str
    window_start: int
    unit: str
    cap: int
    spent: int
    reserved: int
    headroom: int = Field(description="Held for the overruns of the calls in flight.")
    available: int
    overage: int = Field(description="Charged beyond reservations.")
    excess: int = Field(description="Charged beyond reservations and their max_overage.")
    closed: bool = Field(description="Closed by an excess until an admin reopens it.")
    closed_us: int | None
    updated_us: int

    @classmethod
    def of(cls, row: BudgetRow) -> BudgetRowOut:
        data = row.as_dict()
        del data["tenant"]
        return cls(**data, available=row.available, closed=row.closed_us is not None)


class ReopenIn(_In):
    """Reopen a budget an overrun closed: one scope key (``agent:ops-bot``), or every
    closed scope key of the budget."""

    budget_id: Label
    scope_key: Label | None = None


class ClosureOut(BaseModel):
    budget_id: str
    scope_key: str
    closed_us: int
    reservation_id: str = Field(description="The reservation whose commit closed it.")
    excess: int

    @classmethod
    def of(cls, closure: BudgetClosure) -> ClosureOut:
        data = closure.as_dict()
        del data["tenant"]
        return cls(**data)


class ReopenOut(BaseModel):
    """What was reopened (empty: nothing of that budget was closed)."""

    reopened: list[ClosureOut]


class BudgetList(BaseModel):
    tenant: str
    budgets: list[BudgetRowOut]


# -- audit -------------------------------------------------------------------------------


class AuditRecordOut(BaseModel):
    """One link of the tenant's hash chain; ``record`` is the redacted body, parsed."""

    tenant: str
    seq: int
    ts_us: int
    kind: str
    decision_id: str | None
    agent: str | None
    decision: str | None
    record: Any
    prev_hash: str
    hash: str

    @classmethod
    def of(cls, row: AuditRow) -> AuditRecordOut:
        return cls.model_validate(audit_json(row))


def audit_json(row: AuditRow) -> dict[str, Any]:
    """An audit row as plain data, its body parsed."""
    try:
        # NaN and Infinity (which an in-process caller may have logged) stay text.
        record: Any = json.loads(row.body, parse_constant=str)
    except ValueError:  # a body edited into something that is not JSON: as it is
        record = row.body
    return {
        "tenant": row.tenant,
        "seq": row.seq,
        "ts_us": row.ts_us,
        "kind": row.kind,
        "decision_id": row.decision_id,
        "agent": row.agent,
        "decision": row.decision,
        "record": record,
        "prev_hash": row.prev_hash,
        "hash": row.hash,
    }


class AuditPage(BaseModel):
    """Records in chain order. ``next_since_seq`` continues after the last one (pass
    it as ``since_seq``); ``null`` when this page is the end."""

    tenant: str
    records: list[AuditRecordOut]
    next_since_seq: int | None


class ChainBreakOut(BaseModel):
    seq: int
    problem: str


class VerifyOut(BaseModel):
    tenant: str
    ok: bool
    records: int
    breaks: list[ChainBreakOut]


# -- service -----------------------------------------------------------------------------


class HealthOut(BaseModel):
    status: Literal["ok"]


class HeldReloadOut(BaseModel):
    """A policy reload held for confirmation: the file's digest, how many rules serve,
    how many the file has, how many it would remove, and since when (epoch
    seconds)."""

    sha256: str
    serving_rules: int
    new_rules: int
    removed_rules: int
    held_since: float
    reason: str


class ReadyOut(BaseModel):
    """``checks`` names each check and its outcome (``ok`` or why not).
    ``policy_reload_held`` is set while a reload of the policy file waits for
    confirmation: the old policy serves, and the server stays ready."""

    status: Literal["ready", "unavailable"]
    checks: dict[str, str]
    policy_reload_held: HeldReloadOut | None = None


class ConfirmReloadIn(_In):
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{64}$")] = Field(
        description="The digest of the held file, as `/v1/ready` shows it."
    )


class PolicyReloadOut(BaseModel):
    """The policy serving after a confirmed reload."""

    serving_sha256: str
    rules: int


class WhoAmIOut(BaseModel):
    id: str
    tenant: str
    role: Literal["agent", "approver", "admin"]
    name: str

    @classmethod
    def of(cls, key: ApiKey) -> WhoAmIOut:
        return cls(id=key.id, tenant=key.tenant, role=key.role.value, name=key.name)


class ErrorBody(BaseModel):
    code: str = Field(description="Stable, machine-readable: unauthorized, not_found, ...")
    message: str
    field: str | None = Field(None, description="The request field at fault, if one is.")


class ErrorOut(BaseModel):
    error: ErrorBody
