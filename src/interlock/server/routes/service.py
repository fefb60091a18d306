"""Liveness, readiness, the caller's own key, and Prometheus metrics."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from fastapi.concurrency import run_in_threadpool

from interlock.errors import describe
from interlock.server.api_models import HealthOut, ReadyOut, WhoAmIOut
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
    ``policy_reload`` reports a policy file that failed to reload; the server stays
    ready, serving the last good policy."""
    state = state_of(request)
    checks = {
        "store": await run_in_threadpool(_store_check, state),
        "policy": "ok" if state.guard.policy is not None else "no policy loaded",
    }
    ok = all(value == "ok" for value in checks.values())
    if state.watcher is not None:
        failed = state.watcher.last_error
        checks["policy_reload"] = (
            "ok" if failed is None else f"serving the last good policy: {failed}"
        )
    if not ok:
        response.status_code = 503
    return ReadyOut(status="ready" if ok else "unavailable", checks=checks)


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
