"""Liveness, readiness, the caller's own key, and Prometheus metrics."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from fastapi.concurrency import run_in_threadpool

from interlock.errors import describe
from interlock.server.api_models import HealthOut, HeldReloadOut, ReadyOut, WhoAmIOut
from interlock.server.auth import authenticated
from interlock.server.keys import ApiKey
from interlock.server.routes.common import errors
from interlock.server.state import ServerState, state_of

__all__ = ["metrics_router", "router"]

router = APIRouter(prefix="/v1", tags=["service"])
metrics_router = APIRouter(tags=["service"])


@router.get("/health", response_model=HealthOut)
async def health() -> HealthOut:
    """Liveness: the process answers. No key needed."""
    return HealthOut(status="ok")


@router.get(
    "/ready",
    response_model=ReadyOut,
    responses={503: {"model": ReadyOut, "description": "Not ready: see `checks`."}},
)
async def ready(request: Request, response: Response) -> ReadyOut:
    """Readiness: the store answers and a policy is loaded. No key needed.
    ``checks.policy_reload`` reports a policy file that failed to reload, or a reload
    held for confirmation (then also ``policy_reload_held``); either way the server
    stays ready, serving the policy in force."""
    state = state_of(request)
    checks = {
        "store": await run_in_threadpool(_store_check, state),
        "policy": "ok" if state.guard.policy is not None else "no policy loaded",
    }
    ok = all(value == "ok" for value in checks.values())
    held_out: HeldReloadOut | None = None
    if state.watcher is not None:
        status = state.watcher.status
        held = status.held
        if status.last_error is not None:
            checks["policy_reload"] = f"serving the last good policy: {status.last_error}"
        elif held is not None:
            checks["policy_reload"] = f"held: {held.reason}"
        else:
            checks["policy_reload"] = "ok"
        if held is not None:
            held_out = HeldReloadOut(
                sha256=held.sha256,
                serving_rules=held.serving_rules,
                new_rules=held.new_rules,
                removed_rules=len(held.removed),
                held_since=held.held_at,
                reason=held.reason,
            )
    if not ok:
        response.status_code = 503
    return ReadyOut(
        status="ready" if ok else "unavailable", checks=checks, policy_reload_held=held_out
    )


def _store_check(state: ServerState) -> str:
    try:
        with state.store.transaction(write=False) as cur:
            cur.execute("SELECT 1")
            cur.fetchone()
    except Exception as exc:
        return describe(exc)
    return "ok"


@router.get("/whoami", response_model=WhoAmIOut, responses=errors(inputs=False))
async def whoami(key: Annotated[ApiKey, Depends(authenticated)]) -> WhoAmIOut:
    """The key the request carries: its id, tenant, role and name."""
    return WhoAmIOut.of(key)


@metrics_router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """Prometheus text exposition (no key needed: scrape it from inside the network)."""
    body, content_type = await run_in_threadpool(state_of(request).metrics.render)
    return Response(body, media_type=content_type)
