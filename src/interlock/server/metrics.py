"""Prometheus metrics of one server app, in a registry of its own (not the process's
global one: many apps may live in one process, as in tests).

| metric | type | labels |
| --- | --- | --- |
| ``interlock_decisions_total`` | counter | ``verdict`` |
| ``interlock_check_duration_seconds`` | histogram | — |
| ``interlock_approvals_pending`` | gauge (read from the store when scraped) | — |
| ``interlock_http_requests_total`` | counter | ``method``, ``route``, ``status`` |

``route`` is the route's template (``/v1/approvals/{approval_id}``), never the path
itself: ids do not become label values.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from interlock.core.decision import Verdict
from interlock.store.sql import SqlStore

__all__ = ["HttpMetricsMiddleware", "Metrics", "count_pending_approvals"]

log = logging.getLogger("interlock.server")

#: From 100 µs (an in-process verdict plus an audit commit) to 10 s.
_CHECK_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                  0.5, 1.0, 2.5, 10.0)  # fmt: skip


class Metrics:
    """The app's collectors and its registry."""

    def __init__(self, store: SqlStore) -> None:
        self.registry = CollectorRegistry()
        self.decisions = Counter(
            "interlock_decisions",
            "Decisions returned by the server, by verdict.",
            ["verdict"],
            registry=self.registry,
        )
        for verdict in Verdict:  # every verdict shows, at 0 until it happens
            self.decisions.labels(verdict.value)
        self.check_seconds = Histogram(
            "interlock_check_duration_seconds",
            "Time to decide one check or batch, audit record included.",
            buckets=_CHECK_BUCKETS,
            registry=self.registry,
        )
        self.http_requests = Counter(
            "interlock_http_requests",
            "HTTP requests answered, by method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.registry.register(_PendingApprovals(store))

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def count_pending_approvals(store: SqlStore) -> int:
    """Pending approvals not yet past their expiry, across tenants."""
    with store.transaction(write=False) as cur:
        cur.execute(
            store.q("SELECT COUNT(*) FROM approvals WHERE status = 'pending' AND expires_us > ?"),
            (store.clock(),),
        )
        return int(cur.fetchone()[0])


class _PendingApprovals(Collector):
    """``interlock_approvals_pending``, counted in the store at scrape time, so every
    replica reports the shared number. Left out of a scrape when the store fails."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    def describe(self) -> list[Metric]:
        return []  # not known up front: collect() may have nothing to say

    def collect(self) -> Iterator[Metric]:
        try:
            pending = count_pending_approvals(self.store)
        except Exception as exc:
            log.warning("interlock: could not count pending approvals: %s", exc)
            return
        yield GaugeMetricFamily(
            "interlock_approvals_pending", "Approval requests waiting for a human.", pending
        )


class HttpMetricsMiddleware:
    """Counts every HTTP response by method, route template and status (an ASGI
    middleware, so streamed responses are counted too)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # unless the app says otherwise

        async def send_counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.http_requests.labels(scope["method"], template, str(status)).inc()
