"""The server's FastAPI app: one :class:`~interlock.Guard` behind a versioned HTTP API.

Example::

    from interlock import Guard
    from interlock.server import create_app

    guard = Guard.from_file("interlock.yaml", store="sqlite:///.interlock/interlock.db")
    app = create_app(guard)          # serve it with any ASGI server, e.g. uvicorn

Everything is under ``/v1`` (OpenAPI at ``/v1/openapi.json``, its UI at ``/v1/docs``)
except ``/metrics``. The server keeps no state of its own besides a short key cache:
approvals, budgets, rate limits and the audit log are in the guard's store, so any
number of replicas can share one PostgreSQL database.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from interlock import __version__
from interlock.server.body_limit import BodyLimitMiddleware
from interlock.server.check_entry import CheckEntry
from interlock.server.handlers import install_error_handlers
from interlock.server.keys import KeyStore
from interlock.server.limits import DEFAULT_MAX_BODY, DEFAULT_MAX_JSON_DEPTH, MAX_JSON_DEPTH_LIMIT
from interlock.server.metrics import AccessLog, HttpMetricsMiddleware, Metrics
from interlock.server.routes import routers
from interlock.server.routes.fast_check import fast_routes
from interlock.server.state import ServerState
from interlock.server.ui import mount_ui

if TYPE_CHECKING:
    from interlock.guard import Guard
    from interlock.policy.reload import PolicyWatcher

__all__ = ["DEFAULT_MAX_BODY", "DEFAULT_MAX_JSON_DEPTH", "DEFAULT_MAX_WAIT", "create_app"]

#: The longest an approval long-poll waits, in seconds (below common proxy timeouts).
DEFAULT_MAX_WAIT = 60.0

_DESCRIPTION = """\
The Interlock decision point over HTTP: check actions, decide approvals, settle
budgets, read the audit log. Authenticate with an API key
(`Authorization: Bearer ilk_...`, see `interlock keys create`); everything is within
the key's tenant. Errors are `{"error": {"code", "message", "field"}}`.
"""


#: FastAPI's own OpenTelemetry hooks (FastAPI 0.16x) look up the global providers on
#: every request (~10 µs); nothing here uses them. Older FastAPI has no such option.
_TELEMETRY_OFF: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)


def create_app(
    guard: Guard,
    *,
    keys: KeyStore | None = None,
    key_cache_ttl: float = 5.0,
    max_wait: float = DEFAULT_MAX_WAIT,
    max_body_size: int = DEFAULT_MAX_BODY,
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
    watcher: PolicyWatcher | None = None,
    worker: str | None = None,
    access_log: float = 0.0,
    approval_reason_required: bool = True,
) -> FastAPI:
    """The HTTP API over ``guard``, which must have a store (``Guard(policy,
    store=url)``): the API keys live there too. ``keys`` replaces the key store (its
    cache TTL is ``key_cache_ttl`` seconds otherwise); ``max_wait`` bounds an approval
    long-poll; ``max_body_size`` (bytes) bounds a request body (413 above it) and
    ``max_json_depth`` how deep its JSON may nest (400 ``too_deep`` below it, at most
    512); ``watcher`` (the
    :class:`~interlock.policy.reload.PolicyWatcher` reloading the guard's policy file)
    has its last reload failure reported by ``/v1/ready``; ``worker`` (``interlock
    serve --workers``) names the process in each response's ``X-Interlock-Worker``
    header; ``access_log`` is the share of requests logged as JSON lines to the
    ``interlock.access`` logger (0: none, the default);
    ``approval_reason_required`` (the default) refuses to approve or deny without a
    reason (422, field ``reason``), ``False`` lets the reason be blank. The caller keeps
    ownership of ``guard`` and closes it after the app is done."""
    store = guard.store
    if store is None:
        raise ValueError("the server needs a guard with a store: Guard(policy, store=url)")
    if max_wait <= 0:
        raise ValueError(f"max_wait must be positive, not {max_wait!r}")
    if not 0 <= access_log <= 1:
        raise ValueError(f"access_log is a share of requests, 0 to 1, not {access_log!r}")
    if not 1 <= max_json_depth <= MAX_JSON_DEPTH_LIMIT:
        raise ValueError(
            f"max_json_depth must be between 1 and {MAX_JSON_DEPTH_LIMIT}, not {max_json_depth!r}"
        )
    metrics = Metrics(store, guard)
    app = FastAPI(
        title="Interlock",
        version=__version__,
        description=_DESCRIPTION,
        openapi_url="/v1/openapi.json",
        docs_url="/v1/docs",
        redoc_url=None,
        **_TELEMETRY_OFF,
    )
    app.state.interlock = ServerState(
        guard=guard,
        store=store,
        keys=keys if keys is not None else KeyStore(store, cache_ttl=key_cache_ttl),
        metrics=metrics,
        max_wait=max_wait,
        watcher=watcher,
        approval_reason_required=approval_reason_required,
    )
    install_error_handlers(app)
    for router in routers():
        app.include_router(router)
    # The check endpoints' Starlette routes go first (the check entry hands them what it
    # does not answer itself); the FastAPI routes behind them document the endpoints in
    # the OpenAPI schema (see routes/fast_check.py and check_entry.py).
    app.router.routes[0:0] = fast_routes()
    mount_ui(app)  # the approvals page at /ui/ (its data comes from the API, by key)
    app.add_middleware(
        BodyLimitMiddleware, max_body_size=max_body_size, max_json_depth=max_json_depth
    )
    access = AccessLog(access_log, worker) if access_log > 0 else None
    app.add_middleware(  # counts 413s too
        HttpMetricsMiddleware, metrics=metrics, worker=worker, access=access
    )
    app.add_middleware(  # outermost: a well-formed check is answered here, in one pass
        CheckEntry,
        state=app.state.interlock,
        max_body_size=max_body_size,
        max_json_depth=max_json_depth,
        worker=worker,
        access=access,
    )
    return app
