"""Grants over HTTP: the public JWK set, issuing a grant for a decision, claiming one.

- ``GET /v1/keys/jwks.json`` — the grant signing keys a downstream verifier needs
  (public: no API key; it holds no secret). Cached by clients for 60 s.
- ``POST /v1/grants`` — a grant for an allow this server decided for the key's own
  agent, or any of its tenant's for an admin key (``decision_id`` from ``/v1/check``),
  with an audience, binding and ttl. The
  decision is remembered by the process that made it for 5 minutes: behind a load
  balancer, ask the same replica — or let the policy ask for the grant (``grant:``), and
  it comes with the check's answer.
- ``POST /v1/grants/claim`` — claim a grant of the key's tenant, once: 200 with its
  claims; 409 ``grant_replayed``; 410 ``grant_expired``; 400 ``grant_invalid`` (or
  ``unknown_key``, ``bad_signature``) for anything else.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from interlock.errors import (
    ConfigError,
    GrantError,
    GrantExpired,
    GrantReplayed,
    StoreError,
    message_of,
)
from interlock.server.api_models import ErrorOut, GrantClaimsOut, GrantOut
from interlock.server.auth import Permission, require
from interlock.server.errors import ApiError
from interlock.server.keys import ApiKey, Role
from interlock.server.routes.common import errors
from interlock.server.state import state_of

__all__ = ["GrantClaimsOut", "GrantOut", "router"]

router = APIRouter(prefix="/v1", tags=["grants"])
CheckKey = Annotated[ApiKey, Depends(require(Permission.CHECK))]
_DIGEST: Final = r"^sha256:[0-9a-f]{64}$"


def _responses(*statuses: int, **more: str) -> dict[int | str, dict[str, Any]]:
    """``errors(...)`` and the statuses only grants answer with (400, 410)."""
    own = {int(status.lstrip("_")): text for status, text in more.items()}
    return {
        **errors(*statuses),
        **{status: {"model": ErrorOut, "description": text} for status, text in own.items()},
    }


class IssueIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decision_id: str = Field(min_length=1, max_length=200)
    audience: str | None = Field(None, min_length=1, max_length=200)
    binding: str | None = Field(None, pattern=_DIGEST)
    ttl: float | None = Field(None, ge=1, le=3600)


class ClaimIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: str = Field(min_length=1, max_length=8192)


@router.get("/keys/jwks.json", responses={503: {"description": "No signing keys."}})
async def jwks(request: Request) -> JSONResponse:
    """The public JWK set of the grant signing keys: the active key and the retired
    ones whose grants may not have expired. No API key needed."""
    guard = state_of(request).guard
    try:
        document: dict[str, Any] = await run_in_threadpool(guard.grant_jwks)
    except (StoreError, ConfigError) as exc:
        raise ApiError(503, "no_grant_keys", message_of(exc)) from None
    return JSONResponse(document, headers={"Cache-Control": "public, max-age=60"})


@router.post(
    "/grants",
    response_model=GrantOut,
    responses=_responses(403, 404, _400="The decision cannot be granted (`code` says why)."),
)
async def issue(body: IssueIn, request: Request, key: CheckKey) -> GrantOut:
    """A signed, single-use grant for an allow this server decided for this key."""
    guard = state_of(request).guard
    grantable = guard._grantable
    decision = grantable.decision(body.decision_id) if grantable is not None else None
    action = None
    if decision is not None:
        try:
            action = grantable.find(decision) if grantable is not None else None
        except GrantError:
            action = None
    context = action.context if action is not None else None
    mine = context is not None and context.tenant == key.tenant
    if mine and key.role is not Role.ADMIN:  # an agent grants its own calls only
        mine = context is not None and context.agent == key.identity
    if decision is None or not mine:
        raise ApiError(
            404,
            "decision_not_found",
            f"no recent allow {body.decision_id!r} of this key here (a decision is "
            "remembered 5 minutes by the server process that made it)",
            field="decision_id",
        )
    try:
        grant = await run_in_threadpool(
            lambda: guard.issue_grant(
                decision, audience=body.audience, binding=body.binding, ttl=body.ttl
            )
        )
    except (GrantError, ConfigError) as exc:
        raise ApiError(400, getattr(exc, "code", "config_error"), message_of(exc)) from None
    return GrantOut.of(grant)


@router.post(
    "/grants/claim",
    response_model=GrantClaimsOut,
    responses=_responses(
        403,
        409,
        _400="Not a grant of this tenant (`code`: grant_invalid, unknown_key, ...).",
        _410="The grant expired before it was claimed.",
    ),
)
async def claim(body: ClaimIn, request: Request, key: CheckKey) -> GrantClaimsOut:
    """Claim a grant of this key's tenant, exactly once."""
    from interlock.approvals.grants import claim_grant

    store = state_of(request).store
    try:
        claims = await run_in_threadpool(claim_grant, store, body.token, tenant=key.tenant)
    except GrantReplayed as exc:
        raise ApiError(409, exc.code, message_of(exc)) from None
    except GrantExpired as exc:
        raise ApiError(410, exc.code, message_of(exc)) from None
    except GrantError as exc:
        raise ApiError(400, exc.code, message_of(exc), field="token") from None
    return GrantClaimsOut(**claims.as_dict())
