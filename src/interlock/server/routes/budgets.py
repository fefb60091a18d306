"""Budgets of the key's tenant: reserve, commit, release, and their counters.

A check already reserves what an allowed action costs (its ``reservation``); these
routes settle that reservation, and reserve amounts a caller names itself (a proxy
reserving a model call's estimate). Every reservation made or settled here is audited.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Final

from fastapi import APIRouter, Depends, Query, Request

from interlock.core.action import Action, Context
from interlock.core.decision import Decision, ReservationRef, Verdict
from interlock.errors import EvaluationError, ReservationNotFound
from interlock.ledger.budgets import refusal_reason
from interlock.ledger.usage import Usage
from interlock.policy.specs import BudgetSpec, window_start
from interlock.server.api_models import (
    BudgetList,
    BudgetRowOut,
    CommitIn,
    RefusalOut,
    ReleaseIn,
    ReservationOut,
    ReserveIn,
    ReserveOut,
)
from interlock.server.auth import Permission, require
from interlock.server.errors import ApiError
from interlock.server.keys import ApiKey
from interlock.server.routes.common import errors
from interlock.server.state import ServerState, state_of
from interlock.store.records import BudgetLine, Reservation

__all__ = ["DEFAULT_RESERVATION_TTL", "router"]

#: Seconds a reservation made here is held unless committed or released first.
DEFAULT_RESERVATION_TTL: Final = 300.0

router = APIRouter(prefix="/v1/budgets", tags=["budgets"])

WriteKey = Annotated[ApiKey, Depends(require(Permission.BUDGETS_WRITE))]
ReadKey = Annotated[ApiKey, Depends(require(Permission.BUDGETS_READ))]


@router.get("", response_model=BudgetList, responses=errors(403))
def budget_status(
    request: Request,
    key: ReadKey,
    budget_id: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
) -> BudgetList:
    """The tenant's budget counters: cap, spent, reserved, available, overage."""
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
    )
    if outcome.reservation is None:
        assert outcome.refusal is not None
        refusal = outcome.refusal
        return ReserveOut(reserved=False, refusal=RefusalOut.of(refusal, refusal_reason(refusal)))
    reservation = outcome.reservation
    if not reservation.replayed:
        _audit_reserved(state, reservation, key)
    return ReserveOut(reserved=True, reservation=ReservationOut.of(reservation))


@router.post("/commit", response_model=ReservationOut, responses=errors(403, 404, 409))
def commit(body: CommitIn, request: Request, key: WriteKey) -> ReservationOut:
    """Spend a reservation (committing twice changes nothing)."""
    state = state_of(request)
    _own_reservation(state, body.reservation_id, key)
    usage = None
    if body.usage is not None:
        usage = Usage(body.usage.input_tokens, body.usage.output_tokens)
    try:
        settled = state.guard.commit(_holding(body.reservation_id), usage, model=body.model)
    except EvaluationError as exc:  # e.g. no price for the model
        raise ApiError(422, "invalid_request", str(exc), field="model") from exc
    assert settled is not None
    return ReservationOut.of(settled)


@router.post("/release", response_model=ReservationOut, responses=errors(403, 404, 409))
def release(body: ReleaseIn, request: Request, key: WriteKey) -> ReservationOut:
    """Give a reservation back (releasing twice changes nothing)."""
    state = state_of(request)
    _own_reservation(state, body.reservation_id, key)
    settled = state.guard.release(_holding(body.reservation_id))
    assert settled is not None
    return ReservationOut.of(settled)


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
            )
        )
    return lines


def _own_reservation(state: ServerState, reservation_id: str, key: ApiKey) -> Reservation:
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
            "by": key.identity,
        },
    )
