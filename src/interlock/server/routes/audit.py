"""The key's tenant's audit chain: query it, export it, verify it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse

from interlock.server.api_models import (
    AuditPage,
    AuditRecordOut,
    ChainBreakOut,
    VerifyOut,
    audit_json,
)
from interlock.server.audit_query import AuditFilter, audit_page, audit_stream
from interlock.server.auth import Permission, require
from interlock.server.keys import ApiKey
from interlock.server.routes.common import errors
from interlock.server.state import state_of
from interlock.store.sql import SqlStore

__all__ = ["router"]

router = APIRouter(prefix="/v1/audit", tags=["audit"])

ReadKey = Annotated[ApiKey, Depends(require(Permission.AUDIT_READ))]
Filter = Annotated[str | None, Query(min_length=1, max_length=200, pattern=r"^[^\x00]+$")]
SinceSeq = Annotated[
    int, Query(ge=0, le=2**62, description="Only records after this sequence number.")
]
VerdictFilter = Literal["allow", "deny", "require_approval", "undetermined"]


@router.get("", response_model=AuditPage, responses=errors(403))
def query_audit(
    request: Request,
    key: ReadKey,
    since_seq: SinceSeq = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    decision_id: Filter = None,
    kind: Filter = None,
    decision: VerdictFilter | None = None,
    agent: Filter = None,
) -> AuditPage:
    """Records of the tenant's chain in order, after ``since_seq``, matching every
    filter given; page on with ``next_since_seq``."""
    where = AuditFilter(key.tenant, since_seq, decision_id, kind, decision, agent)
    rows = audit_page(state_of(request).store, where, limit)
    return AuditPage(
        tenant=key.tenant,
        records=[AuditRecordOut.of(row) for row in rows],
        next_since_seq=rows[-1].seq if len(rows) == limit else None,
    )


@router.get(
    "/export",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "One JSON object per line (the records of `GET /v1/audit`).",
            "content": {"application/x-ndjson": {}},
        },
        **errors(403),
    },
)
def export_audit(
    request: Request,
    key: ReadKey,
    since_seq: SinceSeq = 0,
    decision_id: Filter = None,
    kind: Filter = None,
    decision: VerdictFilter | None = None,
    agent: Filter = None,
) -> StreamingResponse:
    """Every matching record as JSON lines, oldest first, streamed page by page (a log
    of any size is never held in memory)."""
    where = AuditFilter(key.tenant, since_seq, decision_id, kind, decision, agent)
    return StreamingResponse(
        _lines(state_of(request).store, where), media_type="application/x-ndjson"
    )


def _lines(store: SqlStore, where: AuditFilter, *, chunk: int = 500) -> Iterator[str]:
    """JSON lines, ``chunk`` records at a time (each chunk is one hop to a worker
    thread, so a line each would cost more than writing it)."""
    buffer: list[str] = []
    for row in audit_stream(store, where):
        buffer.append(json.dumps(audit_json(row), separators=(",", ":")) + "\n")
        if len(buffer) >= chunk:
            yield "".join(buffer)
            buffer.clear()
    if buffer:
        yield "".join(buffer)


@router.get("/verify", response_model=VerifyOut, responses=errors(403))
def verify_audit(request: Request, key: ReadKey) -> VerifyOut:
    """Walk the tenant's hash chain; name the first broken link."""
    report = state_of(request).store.verify_audit(key.tenant)
    return VerifyOut(
        tenant=key.tenant,
        ok=report.ok,
        records=report.checked.get(key.tenant, 0),
        breaks=[ChainBreakOut(seq=b.seq, problem=b.problem) for b in report.breaks],
    )
