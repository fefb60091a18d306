"""Approvals of the key's tenant: list, read, wait for, approve and deny.

An approval decided here is decided by the key's name; the store refuses the identity
that requested it — its name, or that name written another way (``403
self_approval``; see :mod:`interlock.core.identity`). Another tenant's approval is ``404``, like
one that does not exist.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool

from interlock.server.api_models import ApprovalList, ApprovalOut, DecideIn
from interlock.server.auth import Permission, require
from interlock.server.keys import ApiKey
from interlock.server.routes.common import ApprovalId, errors
from interlock.server.state import state_of
from interlock.store.records import ApprovalStatus

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
    records = state_of(request).store.list_approvals(tenant=key.tenant, status=wanted, limit=limit)
    return ApprovalList(approvals=[ApprovalOut.of(record) for record in records])


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
    """Approve a pending request: the identical call, retried, may run once."""
    reason = body.reason if body is not None else ""
    record = state_of(request).store.approve(
        approval_id, by=key.identity, reason=reason, tenant=key.tenant
    )
    return ApprovalOut.of(record)


@router.post("/{approval_id}/deny", response_model=ApprovalOut, responses=errors(403, 404, 409))
def deny(
    approval_id: ApprovalId, request: Request, key: DecideKey, body: DecideIn | None = None
) -> ApprovalOut:
    """Deny a pending request: the identical call is denied until the denial lapses."""
    reason = body.reason if body is not None else ""
    record = state_of(request).store.deny(
        approval_id, by=key.identity, reason=reason, tenant=key.tenant
    )
    return ApprovalOut.of(record)
