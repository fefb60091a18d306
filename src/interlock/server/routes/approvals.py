"""Approvals of the key's tenant: list, read, wait for, approve and deny.

An approval decided here is decided by the key's name; the store refuses the identity
that requested it — its name, or that name written another way (``403
self_approval``; see :mod:`interlock.core.identity`). Another tenant's approval is ``404``, like
one that does not exist.

A decision needs a reason unless the app was made with
``approval_reason_required=False``: a blank one (nothing visible in it) is ``422
invalid_request`` with ``field: "reason"``, and nothing is decided. The history
(``GET /v1/approvals/history``) pages through the approvals that left the queue,
newest first, with who decided each, when and why.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool

from interlock.errors import ReasonRequired
from interlock.server.api_models import ApprovalHistory, ApprovalList, ApprovalOut, DecideIn
from interlock.server.auth import Permission, require
from interlock.server.errors import ApiError
from interlock.server.keys import ApiKey
from interlock.server.routes.common import ApprovalId, errors
from interlock.server.state import state_of
from interlock.store.records import ApprovalRecord, ApprovalStatus
from interlock.store.sql_approvals import HistoryCursor

__all__ = ["router"]

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])

ReadKey = Annotated[ApiKey, Depends(require(Permission.APPROVALS_READ))]
ListKey = Annotated[ApiKey, Depends(require(Permission.APPROVALS_LIST))]
DecideKey = Annotated[ApiKey, Depends(require(Permission.APPROVALS_DECIDE))]
StatusFilter = Literal["pending", "approved", "denied", "expired", "claimed", "all"]


@router.get("", response_model=ApprovalList, responses=errors(403))
def list_approvals(
    request: Request,
    key: ListKey,
    status: Annotated[StatusFilter, Query(description="Which ones (or all).")] = "pending",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> ApprovalList:
    """The tenant's approvals, newest first (default: the pending ones)."""
    wanted = None if status == "all" else ApprovalStatus(status)
    state = state_of(request)
    records = state.store.list_approvals(tenant=key.tenant, status=wanted, limit=limit)
    return ApprovalList(
        approvals=[ApprovalOut.of(record) for record in records],
        reason_required=state.approval_reason_required,
    )


@router.get("/history", response_model=ApprovalHistory, responses=errors(403))
def approval_history(
    request: Request,
    key: ListKey,
    limit: Annotated[int, Query(ge=1, le=200, description="Approvals per page.")] = 20,
    before: Annotated[
        str | None,
        Query(
            max_length=100,
            description="The `next` of the previous page: continue with older ones.",
        ),
    ] = None,
) -> ApprovalHistory:
    """The tenant's decided approvals — approved, used (`claimed`), denied or expired —
    newest first by when they left the queue, with who decided each, when and why."""
    cursor = None
    if before is not None:
        try:
            cursor = HistoryCursor.parse(before)
        except ValueError as exc:
            raise ApiError(422, "invalid_request", f"before: {exc}", field="before") from None
    state = state_of(request)
    records, more = state.store.approval_history(tenant=key.tenant, limit=limit, before=cursor)
    return ApprovalHistory(
        approvals=[ApprovalOut.of(record) for record in records],
        next=None if more is None else str(more),
        reason_required=state.approval_reason_required,
    )


@router.get("/{approval_id}", response_model=ApprovalOut, responses=errors(403, 404))
def get_approval(approval_id: ApprovalId, request: Request, key: ReadKey) -> ApprovalOut:
    """One approval: the call (redacted), its context, its state."""
    return ApprovalOut.of(state_of(request).store.get_approval(approval_id, tenant=key.tenant))


@router.get("/{approval_id}/wait", response_model=ApprovalOut, responses=errors(403, 404))
async def wait_for_approval(
    approval_id: ApprovalId,
    request: Request,
    key: ReadKey,
    timeout: Annotated[
        float,
        Query(
            ge=0,
            le=3600,
            allow_inf_nan=False,
            description="Seconds to wait at most (cut to the server's limit, 60 by default).",
        ),
    ] = 30.0,
) -> ApprovalOut:
    """Long-poll: answer as soon as the approval is decided, or when ``timeout``
    passes, with the record as it then stands (still ``pending`` on a timeout)."""
    state = state_of(request)
    await run_in_threadpool(state.store.get_approval, approval_id, tenant=key.tenant)
    record = await state.guard.await_approval(approval_id, min(timeout, state.max_wait))
    return ApprovalOut.of(record)


@router.post("/{approval_id}/approve", response_model=ApprovalOut, responses=errors(403, 404, 409))
def approve(
    approval_id: ApprovalId, request: Request, key: DecideKey, body: DecideIn | None = None
) -> ApprovalOut:
    """Approve a pending request: the identical call, retried, may run once, until the
    policy's `grant_ttl` has passed. A reason is required unless the server says not."""
    return _decide(request, key, approval_id, body, ApprovalStatus.APPROVED)


@router.post("/{approval_id}/deny", response_model=ApprovalOut, responses=errors(403, 404, 409))
def deny(
    approval_id: ApprovalId, request: Request, key: DecideKey, body: DecideIn | None = None
) -> ApprovalOut:
    """Deny a pending request: the identical call is denied until the denial lapses.
    A reason is required unless the server says not."""
    return _decide(request, key, approval_id, body, ApprovalStatus.DENIED)


def _decide(
    request: Request,
    key: ApiKey,
    approval_id: str,
    body: DecideIn | None,
    status: ApprovalStatus,
) -> ApprovalOut:
    state = state_of(request)
    decide = state.store.approve if status is ApprovalStatus.APPROVED else state.store.deny
    try:
        record: ApprovalRecord = decide(
            approval_id,
            by=key.identity,
            reason=body.reason if body is not None else "",
            tenant=key.tenant,
            require_reason=state.approval_reason_required,
        )
    except ReasonRequired as exc:
        raise ApiError(422, "invalid_request", str(exc), field="reason") from None
    return ApprovalOut.of(record)
