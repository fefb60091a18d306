"""Prometheus metrics of one server app, in a registry of its own (not the process's
global one: many apps may live in one process, as in tests).

| metric | type | labels |
| --- | --- | --- |
| ``interlock_decisions_total`` | counter | ``verdict`` |
| ``interlock_check_duration_seconds`` | histogram | — |
| ``interlock_approvals_pending`` | gauge (read from the store when scraped) | — |
| ``interlock_http_requests_total`` | counter | ``method``, ``route``, ``status`` |
| ``interlock_session_views_kept`` | gauge (this process's, read when scraped) | — |
| ``interlock_session_fingerprints_kept`` | gauge (this process's, read when scraped) | — |

``route`` is the route's template (``/v1/approvals/{approval_id}``), never the path
itself: ids do not become label values; on a path no route matches (``unmatched``) a
method outside the standard ones is ``other``. Label children are bound once, not
looked up per request.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from interlock.core.decision import Verdict
from interlock.server.workers import WORKER_HEADER
from interlock.session.history import MemoryHistory
from interlock.store.sql import SqlStore
from interlock.store.sql_sessions import SqlHistory

if TYPE_CHECKING:
    from interlock.guard import Guard

__all__ = ["AccessLog", "HttpMetricsMiddleware", "Metrics", "count_pending_approvals"]

log = logging.getLogger("interlock.server")

#: From 100 µs (an in-process verdict plus an audit commit) to 10 s.
_CHECK_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                  0.5, 1.0, 2.5, 10.0)  # fmt: skip
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: label sets kept bound (beyond it, looked up each time: never a growing dict)
_MAX_BOUND = 1024


class Metrics:
    """The app's collectors and its registry."""

    def __init__(self, store: SqlStore, guard: Guard | None = None) -> None:
        self.registry = CollectorRegistry()
        self.decisions = Counter(
            "interlock_decisions",
            "Decisions returned by the server, by verdict.",
            ["verdict"],
            registry=self.registry,
        )
        #: each verdict's child, bound once (every verdict shows, at 0 until it happens)
        self.decided = {verdict: self.decisions.labels(verdict.value) for verdict in Verdict}
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
        if guard is not None:
            self.registry.register(_SessionsKept(guard))
        self._requests: dict[tuple[str, str, int], Counter] = {}

    def count_request(self, method: str, route: str, status: int) -> None:
        """One more HTTP request answered; each label set's child is bound once. (The
        method only becomes a label for a route that exists; any other is ``other``.)"""
        key = (method, route, status)
        child = self._requests.get(key)
        if child is None:
            if route == "unmatched" and method not in _METHODS:
                method = "other"  # a client cannot mint label values
            child = self.http_requests.labels(method, route, str(status))
            if len(self._requests) < _MAX_BOUND:
                self._requests[key] = child
        child.inc()

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


class _SessionsKept(Collector):
    """What this process's session history keeps in memory, read at scrape time: the
    SQL history's kept views and their fingerprints (bounded by
    ``max_fingerprints_kept``), or the in-memory history's fingerprints (bounded by
    ``max_fingerprints``). Nothing while no policy reads sessions. Per process: with
    ``--workers`` each worker reports its own."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard

    def describe(self) -> list[Metric]:
        return []  # not known up front: no policy may read sessions yet

    def collect(self) -> Iterator[Metric]:
        history = self.guard.sessions
        if isinstance(history, SqlHistory):
            views, prints = history.kept
        elif isinstance(history, MemoryHistory):
            views, prints = None, history.fingerprints_held
        else:
            return
        if views is not None:
            yield GaugeMetricFamily(
                "interlock_session_views_kept",
                "Views of sessions this process keeps to read only what changed since.",
                views,
            )
        yield GaugeMetricFamily(
            "interlock_session_fingerprints_kept",
            "Fingerprints of tool results this process keeps in memory for session rules.",
            prints,
        )


class HttpMetricsMiddleware:
    """Counts every HTTP response by method, route template and status (an ASGI
    middleware, so streamed responses are counted too). With ``worker`` (``--workers``
    above 1) every response names the worker process that answered in the
    ``X-Interlock-Worker`` header; with ``access_log`` above 0 that share of the
    requests is logged, one JSON object a line, to the ``interlock.access`` logger
    (or to ``access``, a log shared with the check entry)."""

    def __init__(
        self,
        app: ASGIApp,
        metrics: Metrics,
        worker: str | None = None,
        access_log: float = 0.0,
        access: AccessLog | None = None,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.header = [(WORKER_HEADER.encode(), worker.encode("latin-1"))] if worker else []
        self.worker = worker
        #: ``access`` shares one log (and its count) with the check entry
        self.access = access or (AccessLog(access_log, worker) if access_log > 0 else None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # unless the app says otherwise
        header = self.header
        started = time.perf_counter() if self.access is not None else 0.0

        async def send_counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if header:
                    message["headers"] = [*message.get("headers", ()), *header]
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.count_request(scope["method"], template, status)
            if self.access is not None:
                self.access.note(scope, template, status, started)


class AccessLog:
    """Every ``1/share``-th request as one JSON line: time, method, path, route
    template, status, duration, worker. Never the query string or a header (an API key
    is in one). Counted, not random, so ``share`` 0.01 logs exactly one in 100."""

    def __init__(self, share: float, worker: str | None) -> None:
        self.every = max(1, round(1 / share))
        self.worker = worker
        self.seen = 0
        self.log = logging.getLogger("interlock.access")
        if self.log.level == logging.NOTSET:  # asked for: on, whatever the root's level
            self.log.setLevel(logging.INFO)
        if not self.log.handlers:  # bare lines on stderr, unless the host logs them itself
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(message)s"))
            self.log.addHandler(handler)
            self.log.propagate = False

    def note(self, scope: Scope, route: str, status: int, started: float) -> None:
        self.seen += 1
        if self.seen % self.every:
            return
        line = {
            "ts": round(time.time(), 3),
            "method": scope["method"],
            "path": scope["path"],
            "route": route,
            "status": status,
            "ms": round((time.perf_counter() - started) * 1000, 3),
            "worker": self.worker,
        }
        self.log.info(json.dumps(line, ensure_ascii=False))
