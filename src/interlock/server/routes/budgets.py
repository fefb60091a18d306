"""Budgets of the key's tenant: reserve, commit, release, reopen, and their counters.

A check already reserves what an allowed action costs (its ``reservation``); these
routes settle that reservation, and reserve amounts a caller names itself (a proxy
reserving a model call's estimate). A reservation is the key's: only a key with its
name, or an admin key, commits or releases it. An admin reopens a budget an overrun
closed. Every reservation made or settled here, and every reopening, is audited.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Final

from fastapi import APIRouter, Depends, Query, Request

from interlock.core.action import Action, Context
from interlock.core.decision import Decision, ReservationRef, Verdict
from interlock.errors import AmountOutOfRange, EvaluationError, ReservationNotFound
from interlock.ledger.budgets import refusal_reason
from interlock.ledger.usage import Usage
from interlock.policy.specs import BudgetSpec, window_start
from interlock.server.api_models import (
    BudgetList,
    BudgetRowOut,
    ClosureOut,
    CommitIn,
    RefusalOut,
    ReleaseIn,
    ReopenIn,
    ReopenOut,
    ReservationOut,
    ReserveIn,
    ReserveOut,
)
from interlock.server.auth import ROLE_PERMISSIONS, Permission, require
from interlock.server.errors import ApiError
from interlock.server.keys import ApiKey
from interlock.server.routes.common import errors
from interlock.server.state import ServerState, state_of
from interlock.store.records import ANY_AGENT, BudgetLine, Reservation, Settler
from interlock.store.settle import MAX_UNITS

__all__ = ["DEFAULT_RESERVATION_TTL", "router"]

#: Seconds a reservation made here is held unless committed or released first.
DEFAULT_RESERVATION_TTL: Final = 300.0

router = APIRouter(prefix="/v1/budgets", tags=["budgets"])

WriteKey = Annotated[ApiKey, Depends(require(Permission.BUDGETS_WRITE))]
ReadKey = Annotated[ApiKey, Depends(require(Permission.BUDGETS_READ))]
AdminKey = Annotated[ApiKey, Depends(require(Permission.BUDGETS_ADMIN))]


@router.get("", response_model=BudgetList, responses=errors(403))
def budget_status(
    request: Request,
    key: ReadKey,
    budget_id: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
) -> BudgetList:
    """The tenant's budget counters: cap, spent, reserved, headroom held for overruns,
    available, overage, excess, and whether an overrun closed them."""
    rows = state_of(request).store.budget_rows(tenant=key.tenant, budget_id=budget_id)
    return BudgetList(tenant=key.tenant, budgets=[BudgetRowOut.of(row) for row in rows])


@router.post("/reserve", response_model=ReserveOut, responses=errors(403))
def reserve(body: ReserveIn, request: Request, key: WriteKey) -> ReserveOut:
    """Reserve on every line or on none. A budget that cannot take its line refuses
    the whole reservation (``reserved: false``, with the numbers); that is a 200."""
    state = state_of(request)
    lines = _lines(state, body, key)
    given = body.idempotency_key or secrets.token_hex(12)
    ttl = body.ttl if body.ttl is not None else DEFAULT_RESERVATION_TTL
    outcome = state.store.reserve(
        tenant=key.tenant,
        # Per key name: two agents of a tenant cannot replay each other's reservation.
        idempotency_key=f"api:{key.identity}:{given}",
        lines=lines,
        ttl_us=int(ttl * 1_000_000),
        owner=key.identity,
    )
    if outcome.reservation is None:
        assert outcome.refusal is not None
        refusal = outcome.refusal
        return ReserveOut(reserved=False, refusal=RefusalOut.of(refusal, refusal_reason(refusal)))
    reservation = outcome.reservation
    if not reservation.replayed:
        _audit_reserved(state, reservation, key)
    return ReserveOut(reserved=True, reservation=ReservationOut.of(reservation))


@router.post("/commit", response_model=ReservationOut, responses=errors(403, 404, 409, 422))
def commit(body: CommitIn, request: Request, key: WriteKey) -> ReservationOut:
    """Spend a reservation: the real usage is charged in full, whatever was reserved;
    past the reservation and its max_overage it is excess, and closes the budget.
    Committing twice changes nothing. Another key's reservation is a 403."""
    state = state_of(request)
    _in_tenant(state, body.reservation_id, key)
    usage = None
    if body.usage is not None:
        usage = Usage(body.usage.input_tokens, body.usage.output_tokens)
    try:
        settled = state.guard.commit(
            _holding(body.reservation_id), usage, model=body.model, by=_settler(key)
        )
    except AmountOutOfRange as exc:  # priced, more than a budget counts
        raise ApiError(422, "invalid_request", str(exc), field="usage") from exc
    except EvaluationError as exc:  # no model named, or no price for it
        raise ApiError(422, "invalid_request", str(exc), field="model") from exc
    assert settled is not None
    return ReservationOut.of(settled)


@router.post("/release", response_model=ReservationOut, responses=errors(403, 404, 409))
def release(body: ReleaseIn, request: Request, key: WriteKey) -> ReservationOut:
    """Give a reservation back: the call did not run (releasing twice changes nothing).
    Another key's reservation is a 403."""
    state = state_of(request)
    _in_tenant(state, body.reservation_id, key)
    settled = state.guard.release(_holding(body.reservation_id), by=_settler(key))
    assert settled is not None
    return ReservationOut.of(settled)


@router.post("/reopen", response_model=ReopenOut, responses=errors(403))
def reopen(body: ReopenIn, request: Request, key: AdminKey) -> ReopenOut:
    """Reopen a budget of the tenant that an overrun closed (one scope key, or all of
    the budget's): it admits reservations again (its counters keep what they spent).
    Admin keys only; audited."""
    state = state_of(request)
    lifted = state.store.reopen_budget(
        tenant=key.tenant, budget_id=body.budget_id, scope_key=body.scope_key
    )
    audit = state.guard.audit
    if lifted and audit is not None:
        audit.write_record(
            key.tenant,
            "budget",
            {
                "status": "reopened",
                "budget_id": body.budget_id,
                "reopened": [closure.as_dict() for closure in lifted],
                "by": key.identity,
            },
        )
    return ReopenOut(reopened=[ClosureOut.of(closure) for closure in lifted])


# -- helpers -------------------------------------------------------------------------------


def _lines(state: ServerState, body: ReserveIn, key: ApiKey) -> list[BudgetLine]:
    policy = state.guard.policy
    specs: dict[str, BudgetSpec] = {b.id: b for b in policy.budgets} if policy else {}
    # The scope key of a line is the one a check of this key would draw on.
    context = Context(tenant=key.tenant, agent=key.identity, session_id=body.session_id)
    action = Action(kind="tool", name=body.tool or "", context=context)
    lines: list[BudgetLine] = []
    seen: set[str] = set()
    for index, line in enumerate(body.lines):
        field = f"lines.{index}.budget_id"
        spec = specs.get(line.budget_id)
        if spec is None:
            raise ApiError(
                422, "invalid_request", f"the policy has no budget {line.budget_id!r}", field=field
            )
        if spec.id in seen:
            raise ApiError(
                422, "invalid_request", f"budget {spec.id!r} is named twice", field=field
            )
        seen.add(spec.id)
        if spec.scope == "tool" and body.tool is None:
            raise ApiError(
                422,
                "invalid_request",
                f"budget {spec.id!r} counts per tool: name the tool",
                field="tool",
            )
        lines.append(
            BudgetLine(
                budget_id=spec.id,
                scope_key=spec.key(action),
                window_start=window_start(spec.window),
                unit=spec.unit,
                cap=spec.limit,
                amount=line.amount,
                headroom=min(spec.headroom(line.amount), MAX_UNITS),
            )
        )
    return lines


def _settler(key: ApiKey) -> Settler:
    """Who settles as ``key``: its name, or anyone's reservation for an admin key."""
    return ANY_AGENT if Permission.BUDGETS_ADMIN in ROLE_PERMISSIONS[key.role] else key.identity


def _in_tenant(state: ServerState, reservation_id: str, key: ApiKey) -> Reservation:
    """The reservation, if it is the key's tenant's (else 404, as for no such id)."""
    reservation = state.store.get_reservation(reservation_id)
    if reservation.tenant != key.tenant:
        raise ReservationNotFound(
            f"no reservation {reservation_id!r}", reservation_id=reservation_id
        )
    return reservation


def _holding(reservation_id: str) -> Decision:
    """An allow holding the reservation: what ``Guard.commit``/``release`` settle."""
    return Decision(
        Verdict.ALLOW, "settled through the API", reservation=ReservationRef(reservation_id)
    )


def _audit_reserved(state: ServerState, reservation: Reservation, key: ApiKey) -> None:
    audit = state.guard.audit
    if audit is None:
        return
    audit.write_record(
        reservation.tenant,
        "budget",
        {
            "reservation_id": reservation.id,
            "status": reservation.status.value,
            "reserved": {line.budget_id: line.amount for line in reservation.lines},
            "owner": reservation.owner,
            "by": key.identity,
        },
    )
