"""The API's routers, one module per resource; :func:`routers` lists them all."""

from __future__ import annotations

from fastapi import APIRouter

from interlock.server.routes import (
    approvals,
    audit,
    budgets,
    checks,
    grants,
    policy,
    replay,
    service,
    sessions,
)

__all__ = ["routers"]


def routers() -> list[APIRouter]:
    return [
        service.router,
        checks.router,
        approvals.router,
        budgets.router,
        audit.router,
        replay.router,
        policy.router,
        grants.router,
        sessions.router,
        service.metrics_router,
    ]
